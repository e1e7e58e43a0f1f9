"""The timeline's cost (issue 47 item 8): the same simulator run with the timeline off, at the
default 1 s step and at 250 ms, interleaved, on one real agent (``tunelab-agent serve`` with the
replayed H200 NVML snapshot, so the GPU reads go through the real wrapper).

Per run: the measured output throughput, the agent's CPU time (all its threads: the recorder is
one of them) and the load generator's own CPU share (its self-check), and the stored timeline's
bytes per attempt-minute (compact JSON, as the controller stores it). Prints a table of the
medians per setting and the throughput change against "off".

  python benchmarks/timeline_overhead.py [--reps 3] [--seconds 20] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import psutil  # noqa: E402

from tests.support.agent_proc import AgentProcess  # noqa: E402
from tunelab.v1 import agent_pb2, run_pb2, server_pb2  # noqa: E402

NVML = HERE / "tests" / "fixtures" / "nvml" / "h200-busy-v2.json"
SIM = [sys.executable, "-m", "tunelab.bench.simulator", "--port", "{port}", "--model", "sim"]
SETTINGS = {"off": None, "1 s": 1.0, "250 ms": 0.25}


def spec(step: float | None, seconds: float, concurrency: int) -> run_pb2.RunSpec:
    builtin = run_pb2.BuiltinBenchmark(
        model="sim",
        concurrency=[concurrency],
        duration_seconds=seconds,
        input_len=32,
        output_len=64,
        warmup=concurrency,
        timeline_step_seconds=step or 0.0,
    )
    if step is None:
        builtin.timeline = False
    return run_pb2.RunSpec(
        server=server_pb2.ServerSpec(
            argv=[*SIM, "--itl-ms", "5"], port=0, ready_model="sim", stop_grace_seconds=5
        ),
        benchmark=run_pb2.BenchmarkSpec(builtin=builtin),
        max_duration_seconds=seconds * 4 + 60,
        experiment="overhead",
    )


def one(
    agent: AgentProcess, run_id: str, step: float | None, args: argparse.Namespace
) -> dict[str, Any]:
    process = psutil.Process(agent.proc.pid)  # type: ignore[union-attr]
    before = process.cpu_times()
    stub = agent.stub()
    stub.StartRun(
        agent_pb2.StartRunRequest(run_id=run_id, spec=spec(step, args.seconds, args.concurrency)),
        timeout=10,
    )
    for update in stub.WatchRun(agent_pb2.WatchRunRequest(run_id=run_id), timeout=600):
        if update.run.state >= run_pb2.RUN_STATE_SUCCEEDED:
            run = update.run
            break
    after = process.cpu_times()
    if run.state != run_pb2.RUN_STATE_SUCCEEDED:
        raise SystemExit(f"{run_id}: {run.message}")
    result = json.loads(run.result_json)
    point = result["points"][0]
    timeline = result.get("timeline")
    seconds = float(point["duration"])
    stored = len(json.dumps(timeline, separators=(",", ":")).encode()) if timeline else 0
    span = (timeline["windows"] * timeline["step_seconds"]) if timeline else seconds
    return {
        "throughput": float(point["output_throughput"]),
        "agent_cpu_s": (after.user + after.system) - (before.user + before.system),
        "client_cpu": float(point["client_check"]["cpu_utilization"]),
        "bytes_per_min": stored / (span / 60.0) if stored else 0.0,
        "series": len(timeline["series"]) if timeline else 0,
        "wall_s": seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="tl-overhead-") as folder:
        agent = AgentProcess(Path(folder) / "agent", ["--nvml-snapshot", str(NVML)]).start()
        try:
            for rep in range(args.reps):  # interleaved, so drift hits every setting alike
                order = list(SETTINGS.items())
                if rep % 2:
                    order.reverse()
                for name, step in order:
                    run_id = f"r{rep}-{name.replace(' ', '')}"
                    rows[name].append(one(agent, run_id, step, args))
                    time.sleep(1.0)
        finally:
            agent.terminate()
    base = statistics.median(r["throughput"] for r in rows["off"])
    print(
        f"{args.reps} interleaved runs per setting, concurrency {args.concurrency}, "
        f"{args.seconds:g} s each (medians)"
    )
    print(
        f"{'timeline':<9} {'tok/s':>9} {'vs off':>8} {'agent CPU':>10} {'client CPU':>11} "
        f"{'series':>7} {'bytes/attempt-min':>18}"
    )
    for name, runs in rows.items():
        tput = statistics.median(r["throughput"] for r in runs)
        agent_cpu = statistics.median(r["agent_cpu_s"] / r["wall_s"] for r in runs)
        client_cpu = statistics.median(r["client_cpu"] for r in runs)
        print(
            f"{name:<9} {tput:>9.0f} {100 * (tput / base - 1):>+7.1f}% "
            f"{100 * agent_cpu:>9.2f}% {100 * client_cpu:>10.1f}% "
            f"{statistics.median(r['series'] for r in runs):>7.0f} "
            f"{statistics.median(r['bytes_per_min'] for r in runs):>18,.0f}"
        )
    print("agent CPU: the agent process's CPU seconds per second of the run (a share of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
