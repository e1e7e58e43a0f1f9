"""A stored experiment spec (normalized dict) → the RunSpec message an agent executes."""

from __future__ import annotations

from typing import Any

from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.common.specbounds import SpecViolation, check_run_spec
from tunelab.controller.spec.errors import SpecIssue
from tunelab.v1 import run_pb2, server_pb2

PROBE_NAME = "x-0000000000000000-a1"  # as long as an attempt id: a server name is bounded


def render_flags(flags: dict[str, Any]) -> list[str]:
    """``{--tp-size: 8, --disable-cuda-graph: true, --x: null, --bs: [1, 2]}`` →
    ``[--tp-size, 8, --disable-cuda-graph, --bs, 1, 2]``, in the spec's order."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None:
            continue
        argv.append(name)
        if value is True:
            continue
        if isinstance(value, list):
            argv.extend(_text(v) for v in value)
        else:
            argv.append(_text(value))
    return argv


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def server_argv(spec: dict[str, Any]) -> list[str]:
    server = spec["server"]
    return [*server["command"], *render_flags(server["flags"])]


def to_run_spec(spec: dict[str, Any], run_name: str, gpus: list[int]) -> run_pb2.RunSpec:
    """``{port}`` stays in argv/env for the agent to fill when the port is ``auto``."""
    server = spec["server"]
    env = dict(server["env"])
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    server_spec = server_pb2.ServerSpec(
        name=run_name,
        argv=server_argv(spec),
        env=env,
        cwd=server["cwd"],
        port=0 if server["port"] == "auto" else int(server["port"]),
        auto_port=server["port"] == "auto",
        ready_path=server["ready"]["path"],
        ready_model=server["ready"]["model"],
        startup_timeout_seconds=server["ready"]["timeout"],
        stop_grace_seconds=server["stop_grace"],
        engine=server.get("engine", ""),
        redact=[str(name) for name in spec.get("redact", [])],
    )
    bench = spec["benchmark"]
    if bench["kind"] == "command":
        benchmark = run_pb2.BenchmarkSpec(
            command=run_pb2.CommandBenchmark(
                argv=bench["command"], result_file=bench["result_file"], env=bench["env"]
            )
        )
    else:
        builtin = run_pb2.BuiltinBenchmark(
            api=bench["api"],
            model=bench["model"],
            concurrency=bench["concurrency"],
            request_rate=bench["rate"],
            burstiness=bench["burstiness"],
            requests=bench["requests"],
            duration_seconds=bench["duration"],
            input_len=bench["input_len"],
            output_len=bench["output_len"],
            range_ratio=bench["range_ratio"],
            warmup=bench["warmup"],
            ignore_eos=bench["ignore_eos"],
            temperature=bench["temperature"],
            slo_ttft_ms=bench["slo_ttft_ms"],
            slo_tpot_ms=bench["slo_tpot_ms"],
            seed=bench["seed"],
            url=bench["url"],
            preset=bench["preset"],
            rates=bench.get("rates", []),
            max_concurrency=bench.get("max_concurrency", 0),
            ramp=bench.get("ramp", {}).get("strategy", ""),
            ramp_start_rate=bench.get("ramp", {}).get("start_rate", 0.0),
            ramp_end_rate=bench.get("ramp", {}).get("end_rate", 0.0),
            warmup_seconds=bench.get("warmup_seconds", 0.0),
            reset_cache_url=bench.get("reset_cache_url", ""),
        )
        if bench.get("dataset"):
            builtin.dataset.CopyFrom(run_pb2.DatasetSpec(**bench["dataset"]))
        if "reset_cache" in bench:
            builtin.reset_cache = bench["reset_cache"]
        if bench.get("tokenizer"):
            builtin.tokenizer = bench["tokenizer"]
        if "timeline_step" in bench:
            builtin.timeline_step_seconds = bench["timeline_step"]
            if not bench["timeline_step"]:
                builtin.timeline = False
        if "profile" in spec:
            builtin.profile.CopyFrom(profile_spec(spec["profile"]))
        if "find" in bench:  # a load search (search: load: find)
            builtin.find_axis = bench["find"]["axis"]
            builtin.find_max = bench["find"]["max"]
            builtin.find_slo.update(bench["find"]["slo"])
            builtin.find_plateau = bench["find"].get("plateau", 0.0)
        benchmark = run_pb2.BenchmarkSpec(builtin=builtin)
    return run_pb2.RunSpec(
        server=server_spec,
        benchmark=benchmark,
        max_duration_seconds=spec["max_duration"],
        experiment=run_name,
    )


def profile_spec(profile: dict[str, Any]) -> run_pb2.ProfileSpec:
    return run_pb2.ProfileSpec(
        point=profile["point"],
        window_seconds=profile["window"],
        window_requests=profile["requests"],
        activities=profile["activities"],
        max_bytes=profile["max_bytes"],
        start_url=profile.get("start_url", ""),
        stop_url=profile.get("stop_url", ""),
        stop_timeout_seconds=profile["stop_timeout"],
    )


def run_spec_issue(spec: dict[str, Any]) -> SpecIssue | None:
    """The first rule of the agent's that the RunSpec of ``spec`` breaks (the same functions
    the agent calls on StartRun), or None."""
    try:
        pb = to_run_spec(spec, PROBE_NAME, [])
        check_run_spec(pb)
        if pb.benchmark.HasField("builtin"):
            BenchConfig.from_builtin_pb(pb.benchmark.builtin, "http://127.0.0.1:1")
    except SpecViolation as exc:
        return SpecIssue(exc.field, exc.problem)
    except BenchConfigError as exc:
        return SpecIssue(f"benchmark.{exc.field}", exc.problem)
    except ValueError as exc:  # a value the message cannot carry (the schema's bounds missed it)
        return SpecIssue("", f"cannot be sent to an agent: {exc}")
    return None
