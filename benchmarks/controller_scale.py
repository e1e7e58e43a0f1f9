"""Controller at scale: 10,000 queued experiments, 200 simulated agents (real gRPC servers in a
few processes, instant runs). Measures submissions per second, the time of one scheduling pass
over the full queue, dispatch latency (attempt committed → agent accepted StartRun) median and
p99, and the controller's RSS. Goals: a pass under 50 ms, dispatch p99 under 100 ms.

Usage: python benchmarks/controller_scale.py [--experiments 10000] [--agents 200]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.controller_proc import ControllerProcess
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.states import HostState
from tunelab.controller.store import SqliteStore
from tunelab.v1 import controller_pb2

FAKE_AGENTS = Path(__file__).resolve().parent.parent / "tests" / "support" / "fake_agents.py"
PER_PROCESS = 50


def spec_text(name: str, repeat: int) -> str:
    doc = {
        "name": name,
        "host": {"labels": {"pool": "scale"}},
        "server": {"command": ["engine"], "flags": {"--port": "{port}"}, "ready": {"model": "m"}},
        "benchmark": {"concurrency": [1], "requests": 1},
        "repeat": repeat,
    }
    return yaml.safe_dump(doc)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100, help="experiments per SubmitExperiments")
    parser.add_argument(
        "--singles", type=int, default=30, help="experiments submitted one by one at the end"
    )
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tunelab-scale-"))
    fleets: list[subprocess.Popen[str]] = []
    controller = ControllerProcess(
        root / "controller", env={"TUNELAB_CONTROLLER_LOG_LEVEL": "warning"}
    )
    try:
        ports: list[int] = []
        for start in range(0, args.agents, PER_PROCESS):
            count = min(PER_PROCESS, args.agents - start)
            fleet = subprocess.Popen(
                [sys.executable, str(FAKE_AGENTS), "--count", str(count)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            fleets.append(fleet)
            assert fleet.stdout is not None
            ports += [int(fleet.stdout.readline()) for _ in range(count)]
        controller.start()
        stub = controller.stub()
        for i, port in enumerate(ports):
            stub.AddHost(
                controller_pb2.AddHostRequest(
                    name=f"h{i:03d}", address=f"127.0.0.1:{port}", labels={"pool": "scale"}
                ),
                timeout=10,
            )
            stub.SetHostDrain(
                controller_pb2.SetHostDrainRequest(name=f"h{i:03d}", drain=True), timeout=10
            )

        started = time.perf_counter()
        for b in range(args.experiments // args.batch):
            stub.SubmitExperiments(
                controller_pb2.SubmitExperimentsRequest(spec_yaml=spec_text(f"b{b}", args.batch)),
                timeout=60,
            )
        submit_seconds = time.perf_counter() - started
        rss_queued = psutil.Process(controller.proc.pid).memory_info().rss  # type: ignore[union-attr]

        # one scheduling pass over the full queue, on a copy of the database with every host free
        copy = root / "pass.db"
        shutil.copy(controller.db, copy)
        for suffix in ("-wal", "-shm"):
            if Path(f"{controller.db}{suffix}").exists():
                shutil.copy(f"{controller.db}{suffix}", f"{copy}{suffix}")
        store = SqliteStore(copy)
        for host in store.list_hosts():
            store.update_host(host.name, drain=False, state=HostState.READY)
        t0 = time.perf_counter()
        placed = Scheduler(store).pass_once()
        pass_full = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = Scheduler(store).pass_once()
        pass_busy = time.perf_counter() - t0
        store.close()

        started = time.perf_counter()
        for i in range(len(ports)):
            stub.SetHostDrain(
                controller_pb2.SetHostDrainRequest(name=f"h{i:03d}", drain=False), timeout=10
            )
        peak_rss = rss_queued
        while True:
            counts = {
                s: len(
                    stub.ListExperiments(
                        controller_pb2.ListExperimentsRequest(states=[s], limit=1), timeout=30
                    ).experiments
                )
                for s in (
                    controller_pb2.EXPERIMENT_STATE_QUEUED,
                    controller_pb2.EXPERIMENT_STATE_RUNNING,
                )
            }
            peak_rss = max(peak_rss, psutil.Process(controller.proc.pid).memory_info().rss)  # type: ignore[union-attr]
            if not any(counts.values()):
                break
            time.sleep(1.0)
        drain_seconds = time.perf_counter() - started

        # one experiment at a time on the idle fleet: the latency a single submission sees
        single_ids = []
        for n in range(args.singles):
            reply = stub.SubmitExperiments(
                controller_pb2.SubmitExperimentsRequest(spec_yaml=spec_text(f"single{n}", 1)),
                timeout=30,
            )
            single_ids.append(reply.experiments[0].id)
            while True:
                got = stub.GetExperiment(
                    controller_pb2.GetExperimentRequest(id=single_ids[-1]), timeout=10
                )
                if got.experiment.state == controller_pb2.EXPERIMENT_STATE_SUCCEEDED:
                    break
                time.sleep(0.05)

        store = SqliteStore(controller.db)
        rows = store._query(
            "SELECT experiment_id, created_at, acked_at FROM attempts WHERE acked_at IS NOT NULL"
        )
        store.close()
        singles = set(single_ids)
        latencies = [
            (r["acked_at"] - r["created_at"]) * 1000
            for r in rows
            if r["experiment_id"] not in singles
        ]
        single_latencies = [
            (r["acked_at"] - r["created_at"]) * 1000 for r in rows if r["experiment_id"] in singles
        ]
    finally:
        if controller.proc is not None:
            controller.terminate()
        for fleet in fleets:
            if fleet.stdin:
                fleet.stdin.close()
            fleet.wait(30)
        shutil.rmtree(root, ignore_errors=True)

    print(
        f"controller scale: {args.experiments} experiments, "
        f"{args.agents} simulated agents (instant runs)"
    )
    print(f"{'figure':<50} {'value':>14} {'goal':>10}")
    rows_out = [
        ("submissions per second", f"{args.experiments / submit_seconds:,.0f}/s", ""),
        (
            f"scheduling pass, full queue ({len(placed)} placed)",
            f"{pass_full * 1000:.1f} ms",
            "< 50 ms",
        ),
        (
            f"scheduling pass, all hosts busy ({len(again)} placed)",
            f"{pass_busy * 1000:.1f} ms",
            "< 50 ms",
        ),
        ("dispatch latency median (200-wide waves)", f"{statistics.median(latencies):.1f} ms", ""),
        (
            "dispatch latency p99 (200-wide waves)",
            f"{percentile(latencies, 0.99):.1f} ms",
            "< 100 ms",
        ),
        ("dispatch latency max (200-wide waves)", f"{max(latencies):.1f} ms", ""),
        (
            "dispatch latency median (one at a time)",
            f"{statistics.median(single_latencies):.1f} ms",
            "",
        ),
        (
            "dispatch latency p99 (one at a time)",
            f"{percentile(single_latencies, 0.99):.1f} ms",
            "< 100 ms",
        ),
        ("attempts dispatched", f"{len(latencies)} + {len(single_latencies)}", ""),
        ("queue drained in", f"{drain_seconds:.1f} s", ""),
        ("controller RSS with the queue full", f"{rss_queued / 2**20:.0f} MiB", ""),
        ("controller RSS peak while draining", f"{peak_rss / 2**20:.0f} MiB", ""),
    ]
    for name, value, goal in rows_out:
        print(f"{name:<50} {value:>14} {goal:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
