"""A stored experiment spec (normalized dict) → the RunSpec message an agent executes."""

from __future__ import annotations

from typing import Any

from tunelab.v1 import run_pb2, server_pb2


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
        ready_path=server["ready"]["path"],
        ready_model=server["ready"]["model"],
        startup_timeout_seconds=server["ready"]["timeout"],
        stop_grace_seconds=server["stop_grace"],
        engine=server.get("engine", ""),
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
        )
        benchmark = run_pb2.BenchmarkSpec(builtin=builtin)
    return run_pb2.RunSpec(
        server=server_spec,
        benchmark=benchmark,
        max_duration_seconds=spec["max_duration"],
        experiment=run_name,
    )
