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

``reset_cache`` unset means on for a sweep of several points on vLLM or SGLang (issue 27), off
otherwise; set, it is what the spec says (a generic server without a URL then gets a warning).

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


def plan(
    engine: EngineProfile, server_argv: tuple[str, ...], bench: dict[str, Any], trace_dir: Path
) -> EnginePlan:
    """The plan for a builtin benchmark ``bench`` (BenchConfig.to_dict()) on ``engine``."""
    argv: list[str] = []
    env: dict[str, str] = {}
    settings: dict[str, Any] = {}
    warnings: list[str] = []
    if int(bench.get("profile_point", -1)) >= 0:
        activities = [a.upper() for a in bench.get("profile_activities", ("cpu", "gpu"))]
        if engine.name == "vllm":
            if "--profiler-config" in server_argv or any(
                a.startswith("--profiler-config") for a in server_argv
            ):
                warnings.append(
                    "profile: the server's own --profiler-config is kept; its traces are not "
                    "collected by the agent"
                )
            else:
                config = {
                    "profiler": "torch",
                    "torch_profiler_dir": str(trace_dir),
                    "torch_profiler_use_gzip": True,
                    "torch_profiler_with_stack": False,
                }  # vLLM also writes its key_averages table (*.profiler_out.txt) beside it
                argv += ["--profiler-config", json.dumps(config, separators=(",", ":"))]
            if sorted(activities) != ["CPU", "GPU"]:
                warnings.append("profile: vLLM's torch profiler records CPU and GPU always")
            settings["profile_start_url"] = bench.get("profile_start_url") or "/start_profile"
            settings["profile_stop_url"] = bench.get("profile_stop_url") or "/stop_profile"
        elif engine.name == "sglang":
            env[SGLANG_TRACE_DIR] = str(trace_dir)
            body = {"output_dir": str(trace_dir), "activities": activities}
            settings["profile_start_url"] = bench.get("profile_start_url") or "/start_profile"
            settings["profile_stop_url"] = bench.get("profile_stop_url") or "/stop_profile"
            settings["profile_start_body"] = json.dumps(body)
        else:
            env[GENERIC_TRACE_DIR] = str(trace_dir)
            if not bench.get("profile_start_url") or not bench.get("profile_stop_url"):
                warnings.append(
                    "profile: a generic server needs profile.start_url and profile.stop_url"
                )
    asked = bench.get("reset_cache")
    if asked is None:  # the default: on for a sweep of several points, where the engine can
        asked = len(bench.get("concurrency") or ()) > 1 and engine.name in ("vllm", "sglang")
    if asked and not bench.get("reset_cache_url"):
        if engine.name == "vllm":
            env[VLLM_DEV_MODE] = "1"
            settings["reset_cache_url"] = "/reset_prefix_cache"
        elif engine.name == "sglang":
            settings["reset_cache_url"] = "/flush_cache"
        else:
            warnings.append("reset_cache: a generic server needs benchmark.reset_cache_url")
    return EnginePlan(tuple(argv), env, settings, tuple(warnings))
