"""How each engine is profiled and has its cache reset: the engine profile's side of issue 27.

- **vLLM** (0.32: ``vllm/entrypoints/serve/profile/api_router.py``, ``.../dev/cache/``): the
  server is started with ``--profiler-config`` (torch profiler, gzip, no stacks, the trace folder
  the agent chose); ``POST /start_profile`` and ``POST /stop_profile`` exist only then. The cache
  is reset by ``POST /reset_prefix_cache``, a development endpoint that exists only with
  ``VLLM_SERVER_DEV_MODE=1``, which the agent sets only when a reset was asked for (it also
  opens ``/sleep``, ``/wake_up`` and ``/collective_rpc``).
- **SGLang** ("Benchmark and Profiling"): ``SGLANG_TORCH_PROFILER_DIR`` in the environment and
  ``POST /start_profile`` with ``output_dir`` and ``activities`` (``CPU``, ``GPU``), then
  ``POST /stop_profile``; ``POST /flush_cache`` empties the radix cache.
- **generic**: the spec names the two URLs (paths on the server or full URLs); the agent sets
  ``TUNELAB_PROFILE_DIR`` to the trace folder so the server can write its traces there. No
  cache reset unless the spec names ``reset_cache_url``.

``reset_cache`` unset means on for a sweep of several points on vLLM or SGLang (issue 27): a
list of several concurrencies or several rates, or a load search (``find:``), which runs a
ladder of points on the one server; off otherwise. Set, it is what the spec says (a generic
server without a URL then gets a warning).

``plan`` is pure: the same spec gives the same plan, so a restarted agent computes it again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunelab.agent.engines.profiles import EngineProfile

VLLM_DEV_MODE = "VLLM_SERVER_DEV_MODE"
SGLANG_TRACE_DIR = "SGLANG_TORCH_PROFILER_DIR"
GENERIC_TRACE_DIR = "TUNELAB_PROFILE_DIR"


@dataclass(frozen=True)
class EnginePlan:
    """What the agent adds to the server's start and to the benchmark's settings."""

    argv: tuple[str, ...] = ()  # appended to the server's argv
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment
    bench: dict[str, Any] = field(default_factory=dict)  # BenchConfig fields to set
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfilerSetup:
    """What the server's start needs so that its profiler writes into ``trace_dir``."""

    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    own_config: bool = False  # vLLM's argv already has its own --profiler-config (kept)


def profiler_setup(
    engine: EngineProfile, server_argv: tuple[str, ...], trace_dir: Path
) -> ProfilerSetup:
    """The flags and environment that make ``engine`` profilable into ``trace_dir``: the one
    mechanism behind a run's ``profile:`` and ``tunelab server start --profile``."""
    if engine.name == "vllm":
        if any(a == "--profiler-config" or a.startswith("--profiler-config=") for a in server_argv):
            return ProfilerSetup(own_config=True)
        config = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir),
            "torch_profiler_use_gzip": True,
            "torch_profiler_with_stack": False,
        }  # vLLM also writes its key_averages table (*.profiler_out.txt) beside it
        return ProfilerSetup(("--profiler-config", json.dumps(config, separators=(",", ":"))))
    if engine.name == "sglang":
        return ProfilerSetup(env={SGLANG_TRACE_DIR: str(trace_dir)})
    return ProfilerSetup(env={GENERIC_TRACE_DIR: str(trace_dir)})


@dataclass(frozen=True)
class ProfilerCalls:
    """The HTTP calls around a window: paths on the server (or URLs) and the start's body."""

    start_url: str
    stop_url: str
    start_body: str = ""
    warnings: tuple[str, ...] = ()


def profiler_calls(
    engine: EngineProfile,
    trace_dir: Path,
    activities: list[str],
    start_url: str = "",
    stop_url: str = "",
) -> ProfilerCalls:
    """How to start and stop ``engine``'s profiler; a generic server's URLs are the caller's
    (empty when not given: the caller refuses or warns)."""
    upper = [a.upper() for a in activities] or ["CPU", "GPU"]
    if engine.name == "vllm":
        warnings: tuple[str, ...] = ()
        if sorted(upper) != ["CPU", "GPU"]:
            warnings = ("profile: vLLM's torch profiler records CPU and GPU always",)
        return ProfilerCalls(
            start_url or "/start_profile", stop_url or "/stop_profile", warnings=warnings
        )
    if engine.name == "sglang":
        body = {"output_dir": str(trace_dir), "activities": upper}
        return ProfilerCalls(
            start_url or "/start_profile", stop_url or "/stop_profile", json.dumps(body)
        )
    return ProfilerCalls(start_url, stop_url)


def several_points(bench: dict[str, Any]) -> bool:
    """Whether the builtin benchmark ``bench`` runs more than one point on its server: several
    concurrencies, several rates, or a load search (its ladder and bisection are points)."""
    return (
        len(bench.get("concurrency") or ()) > 1
        or len(bench.get("rates") or ()) > 1
        or bool(bench.get("find_axis"))
    )


def plan(
    engine: EngineProfile, server_argv: tuple[str, ...], bench: dict[str, Any], trace_dir: Path
) -> EnginePlan:
    """The plan for a builtin benchmark ``bench`` (BenchConfig.to_dict()) on ``engine``."""
    argv: list[str] = []
    env: dict[str, str] = {}
    settings: dict[str, Any] = {}
    warnings: list[str] = []
    if int(bench.get("profile_point", -1)) >= 0:
        setup = profiler_setup(engine, server_argv, trace_dir)
        argv += setup.argv
        env.update(setup.env)
        if setup.own_config:
            warnings.append(
                "profile: the server's own --profiler-config is kept; its traces are not "
                "collected by the agent"
            )
        calls = profiler_calls(
            engine,
            trace_dir,
            list(bench.get("profile_activities", ("cpu", "gpu"))),
            str(bench.get("profile_start_url") or ""),
            str(bench.get("profile_stop_url") or ""),
        )
        warnings += calls.warnings
        if engine.name in ("vllm", "sglang"):
            settings["profile_start_url"] = calls.start_url
            settings["profile_stop_url"] = calls.stop_url
        if calls.start_body:
            settings["profile_start_body"] = calls.start_body
        if engine.name not in ("vllm", "sglang") and (not calls.start_url or not calls.stop_url):
            warnings.append(
                "profile: a generic server needs profile.start_url and profile.stop_url"
            )
    asked = bench.get("reset_cache")
    if asked is None:  # the default: on for a sweep of several points, where the engine can
        asked = several_points(bench) and engine.name in ("vllm", "sglang")
    if asked and not bench.get("reset_cache_url"):
        if engine.name == "vllm":
            env[VLLM_DEV_MODE] = "1"
            settings["reset_cache_url"] = "/reset_prefix_cache"
        elif engine.name == "sglang":
            settings["reset_cache_url"] = "/flush_cache"
        else:
            warnings.append("reset_cache: a generic server needs benchmark.reset_cache_url")
    return EnginePlan(tuple(argv), env, settings, tuple(warnings))
