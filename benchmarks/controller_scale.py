"""Controller at scale: 10,000 queued experiments, 200 simulated agents (real gRPC servers in a
few processes, instant runs). Measures submissions per second, the time of one scheduling pass
over the full queue, dispatch latency (attempt committed → agent accepted StartRun) median and
p99, and the controller's RSS. Goals: a pass under 50 ms, dispatch p99 under 100 ms.

Then, beside those figures: submit→StartRun (the agent's arrival time) one experiment at a time
on healthy hosts while one of 200 hosts answers every call only at its deadline and has work
queued for it (goal p99 < 100 ms), and unary p99 on each daemon with 200 open streams
(benchmarks/stream_load.py; goal < 20 ms).

Usage: python benchmarks/controller_scale.py [--experiments 10000] [--agents 200] [--pin]

--pin puts the controller on CPU 0 and the simulated agents with this script on the other CPUs
(taskset), as a controller and its agents on separate hosts would be; without it all share.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import stream_load
from tests.support.controller_proc import ControllerProcess
from tunelab.controller.agent_client import GrpcAgentClient
from tunelab.controller.aiocalls import StartRunCall
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.states import HostState
from tunelab.controller.store import SqliteStore
from tunelab.v1 import controller_pb2, controller_pb2_grpc, run_pb2

FAKE_AGENTS = Path(__file__).resolve().parent.parent / "tests" / "support" / "fake_agents.py"
PER_PROCESS = 50


class PinnedController(ControllerProcess):
    """The controller alone on CPU 0 (every thread it starts inherits the mask)."""

    def command(self) -> list[str]:
        return ["taskset", "-c", "0", *super().command()]


def spec_text(name: str, repeat: int, host: dict[str, Any] | None = None) -> str:
    doc = {
        "name": name,
        "host": host or {"labels": {"pool": "scale"}},
        "server": {"command": ["engine"], "flags": {"--port": "{port}"}, "ready": {"model": "m"}},
        "benchmark": {"concurrency": [1], "requests": 1},
        "repeat": repeat,
    }
    return yaml.safe_dump(doc)


def copy_db(source: Path, target: Path) -> None:
    """A SQLite store with its WAL, shared memory and secrets, to measure a pass on."""
    for suffix in ("", "-wal", "-shm", ".secrets"):
        if Path(f"{source}{suffix}").exists():
            shutil.copy(f"{source}{suffix}", f"{target}{suffix}")


def passes(rows: list[Any], gap: float = 0.025) -> list[list[Any]]:
    """Attempts grouped by the pass that placed them: a pass commits its placements in chunks
    a few ms apart (scheduler.COMMIT_CHUNK), each with its own created_at."""
    groups: list[list[Any]] = []
    for row in sorted(rows, key=lambda r: r["created_at"]):
        if groups and row["created_at"] - groups[-1][-1]["created_at"] <= gap:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


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
    parser.add_argument(
        "--hung-singles", type=int, default=60, help="one by one, with one host hung"
    )
    parser.add_argument(
        "--pin", action="store_true", help="controller on CPU 0, agents and this script elsewhere"
    )
    parser.add_argument(
        "--test-polls",
        action="store_true",
        help="the tests' polling (every run 4 times a second, hosts twice) instead of the defaults",
    )
    parser.add_argument("--floor-of", help=argparse.SUPPRESS)  # the child of floor_in_child
    stream_load.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.floor_of:
        print(json.dumps(bare_wave_floor([int(p) for p in args.floor_of.split(",")])))
        return 0
    sizes = ("experiments", "agents", "batch", "singles", "hung_singles")
    if min(getattr(args, name) for name in sizes) < 1:
        parser.error(
            "--experiments, --agents, --batch, --singles and --hung-singles must be at least 1"
        )
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        parser.error("--pin needs two CPUs")
    if args.pin:
        os.sched_setaffinity(0, cpus[1:])  # the fleets inherit it
    starts = Path(tempfile.mkdtemp(prefix="tunelab-starts-")) / "starts.txt"
    root = Path(tempfile.mkdtemp(prefix="tunelab-scale-"))
    fleets: list[subprocess.Popen[str]] = []
    env = {"TUNELAB_CONTROLLER_LOG_LEVEL": "warning"}
    if not args.test_polls:  # the shipped defaults, not the tests' 4 looks a second at each run
        env |= {
            "TUNELAB_CONTROLLER_TICK": "0.5s",
            "TUNELAB_CONTROLLER_HOST_POLL_INTERVAL": "5s",
            "TUNELAB_CONTROLLER_ATTEMPT_POLL_INTERVAL": "2s",
            "TUNELAB_CONTROLLER_SCRAPE_INTERVAL": "5s",
        }
    controller = (PinnedController if args.pin else ControllerProcess)(root / "controller", env=env)
    try:
        ports: list[int] = []
        for start in range(0, args.agents, PER_PROCESS):
            count = min(PER_PROCESS, args.agents - start)
            fleet = subprocess.Popen(
                [sys.executable, str(FAKE_AGENTS), "--count", str(count), "--starts", str(starts)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            fleets.append(fleet)
            assert fleet.stdout is not None
            ports += [int(fleet.stdout.readline()) for _ in range(count)]
        hung = subprocess.Popen(
            [sys.executable, str(FAKE_AGENTS), "--count", "0", "--slow", "1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        fleets.append(hung)
        assert hung.stdout is not None
        hung_port = int(hung.stdout.readline())
        floor = floor_in_child(ports, str(cpus[0]) if args.pin else None)
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
        for b, first in enumerate(range(0, args.experiments, args.batch)):
            count = min(args.batch, args.experiments - first)
            stub.SubmitExperiments(
                controller_pb2.SubmitExperimentsRequest(spec_yaml=spec_text(f"b{b}", count)),
                timeout=60,
            )
        submit_seconds = time.perf_counter() - started
        rss_queued = psutil.Process(controller.proc.pid).memory_info().rss  # type: ignore[union-attr]

        # one scheduling pass over the full queue, on a copy of the database with every host free
        copy = root / "pass.db"
        copy_db(controller.db, copy)
        store = SqliteStore(copy)
        for host in store.list_hosts():
            store.transition_host(host.name, host, HostState.READY, drain=False)
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

        hung_ids = hung_phase(stub, hung_port, args.agents, args.hung_singles)
        stream_rows = stream_load.measure(args, root)  # fresh daemons: the streams alone

        store = SqliteStore(controller.db)
        rows = store._query(
            "SELECT a.id, a.experiment_id, a.created_at, a.acked_at, e.submitted_at "
            "FROM attempts a JOIN experiments e ON e.id = a.experiment_id "
            "WHERE a.acked_at IS NOT NULL"
        )
        store.close()
        arrivals = {
            run: float(at) for run, at in (line.split() for line in starts.read_text().splitlines())
        }
        singles = set(single_ids)
        pinned = {e.id for e in stub.ListExperiments(
            controller_pb2.ListExperimentsRequest(limit=100), timeout=30
        ).experiments if e.name.startswith("for-hung")}  # fmt: skip
        waves = [r for r in rows if r["experiment_id"] not in singles | hung_ids | pinned]
        latencies = [(r["acked_at"] - r["created_at"]) * 1000 for r in waves]
        wide = [
            sorted(arrivals[r["id"]] - wave[0]["created_at"] for r in wave if r["id"] in arrivals)
            for wave in passes(waves)
            if len(wave) >= max(1, args.agents // 2)
        ]
        first_arrival = [v[0] * 1000 for v in wide]
        spread = [(v[-1] - v[0]) * 1000 for v in wide]
        reached = [
            (arrivals[r["id"]] - r["created_at"]) * 1000 for r in waves if r["id"] in arrivals
        ]
        single_rows = [r for r in rows if r["experiment_id"] in singles]
        single_latencies = [(r["acked_at"] - r["created_at"]) * 1000 for r in single_rows]
        single_submit = [(arrivals[r["id"]] - r["submitted_at"]) * 1000 for r in single_rows]
        hung_submit = [
            (arrivals[r["id"]] - r["submitted_at"]) * 1000
            for r in rows
            if r["experiment_id"] in hung_ids and r["id"] in arrivals
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
        + (", controller pinned to CPU 0, agents to the rest" if args.pin else "")
        + (", the tests' polling intervals" if args.test_polls else ", default polling intervals")
    )
    print(f"{'figure':<50} {'value':>14} {'goal':>10}")
    floor_p99 = statistics.median(w["p99"] for w in floor)
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
        (
            f"dispatch latency median ({args.agents}-wide waves)",
            f"{statistics.median(latencies):.1f} ms",
            "",
        ),
        (
            f"dispatch latency p99 ({args.agents}-wide waves)",
            f"{percentile(latencies, 0.99):.1f} ms",
            "< 100 ms",
        ),
        (f"dispatch latency max ({args.agents}-wide waves)", f"{max(latencies):.1f} ms", ""),
        (
            "  committed → StartRun at its agent, p50 / p99",
            f"{statistics.median(reached):.1f} / {percentile(reached, 0.99):.1f} ms",
            "",
        ),
        (
            "  committed → first StartRun of its wave arrives, median",
            f"{statistics.median(first_arrival):.1f} ms" if first_arrival else "-",
            "",
        ),
        (
            "  first → last arrival in a wave, median",
            f"{statistics.median(spread):.1f} ms" if spread else "-",
            "",
        ),
        (
            "  a pass's first commit → its last StartRun arrives, median",
            f"{statistics.median(v[-1] * 1000 for v in wide):.1f} ms" if wide else "-",
            "",
        ),
        (
            f"  floor: {len(ports)} bare StartRun calls, p99 / last answer",
            f"{floor_p99:.1f} / {statistics.median(w['last'] for w in floor):.1f} ms",
            "",
        ),
        (
            "  floor: the client's CPU for those calls",
            f"{statistics.median(w['cpu'] for w in floor):.1f} ms",
            "",
        ),
        (
            "  the controller's share: wave p99 over the floor's p99",
            f"{percentile(latencies, 0.99) - floor_p99:.1f} ms",
            "",
        ),
        (
            "  wave p99 / the floor's p99",
            f"{percentile(latencies, 0.99) / floor_p99:.2f}x",
            "<= 1.25x",
        ),
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
        (
            "submit→StartRun p50 / p99, one at a time",
            f"{statistics.median(single_submit):.1f} / {percentile(single_submit, 0.99):.1f} ms",
            "",
        ),
        (
            f"submit→StartRun p50 / p99, 1 of {args.agents} hosts hung",
            f"{statistics.median(hung_submit):.1f} / {percentile(hung_submit, 0.99):.1f} ms",
            "< 100 ms",
        ),
        ("  (healthy experiments measured with the host hung)", f"{len(hung_submit)}", ""),
        ("queue drained in", f"{drain_seconds:.1f} s", ""),
        ("controller RSS with the queue full", f"{rss_queued / 2**20:.0f} MiB", ""),
        ("controller RSS peak while draining", f"{peak_rss / 2**20:.0f} MiB", ""),
    ]
    for name, value, goal in [*rows_out, *stream_rows]:
        print(f"{name:<52} {value:>20} {goal:>12}")
    return 0


def bare_wave_floor(ports: list[int], waves: int = 5) -> list[dict[str, float]]:
    """One StartRun per port, issued at once through the controller's own agent client, with no
    controller around them: per wave, the p99 and the last answer (ms, from the first send) and
    the client's CPU (all its threads). Run in a child with the controller's CPUs
    (``floor_in_child``), this is the floor under the wave figures: the controller cannot answer
    faster than its client."""
    client = GrpcAgentClient()
    spec = run_pb2.RunSpec()
    try:
        for port in ports:  # connect every channel first
            client.start_run(f"127.0.0.1:{port}", None, f"warm-{port}", spec)
        out = []
        for wave in range(waves):
            cpu, started = time.process_time(), time.perf_counter()
            futures = client.start_runs(
                [
                    StartRunCall(f"127.0.0.1:{port}", None, f"floor-{wave}-{port}", spec)
                    for port in ports
                ]
            )
            answered = _Arrivals(len(futures))
            for future in futures:
                future.add_done_callback(answered.note)
            for future in futures:
                future.result()
            ms = sorted((t - started) * 1000 for t in answered.wait(60))
            out.append(
                {
                    "p99": percentile(ms, 0.99),
                    "last": ms[-1],
                    "cpu": (time.process_time() - cpu) * 1000,
                }
            )
        return out
    finally:
        client.close()


class _Arrivals:
    """When each of ``count`` futures was answered (their callbacks run on the client's loop
    thread, after ``result()`` has already woken its waiters)."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._times: list[float] = []
        self._lock = threading.Lock()
        self._all = threading.Event()

    def note(self, _future: object) -> None:
        with self._lock:
            self._times.append(time.perf_counter())
            if len(self._times) == self._count:
                self._all.set()

    def wait(self, timeout: float) -> list[float]:
        if not self._all.wait(timeout):
            raise TimeoutError(f"{self._count - len(self._times)} answers never noted")
        return self._times


def floor_in_child(ports: list[int], cpus: str | None) -> list[dict[str, float]]:
    """``bare_wave_floor`` in a fresh process on ``cpus`` (the controller's), as the controller
    would send: not on the agents' core, and with no gRPC threads of this script around."""
    command = [sys.executable, __file__, "--floor-of", ",".join(map(str, ports))]
    done = subprocess.run(
        ["taskset", "-c", cpus, *command] if cpus else command,
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    waves: list[dict[str, float]] = json.loads(done.stdout.splitlines()[-1])
    return waves


def hung_phase(
    stub: controller_pb2_grpc.ControllerStub, hung_port: int, agents: int, singles: int
) -> set[str]:
    """Swap one healthy host for one that answers every call at its deadline (GetInfo 3 s,
    StartRun 10 s), keep work queued for it, then submit one experiment at a time."""
    stub.SetHostDrain(
        controller_pb2.SetHostDrainRequest(name=f"h{agents - 1:03d}", drain=True), timeout=10
    )
    stub.AddHost(
        controller_pb2.AddHostRequest(
            name="hung", address=f"127.0.0.1:{hung_port}", labels={"pool": "scale"}
        ),
        timeout=10,
    )
    deadline = time.monotonic() + 30
    while True:
        [host] = [
            h for h in stub.ListHosts(controller_pb2.ListHostsRequest(), timeout=30).hosts
            if h.name == "hung"
        ]  # fmt: skip
        if host.state == controller_pb2.HOST_STATE_READY or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    stub.SubmitExperiments(  # its StartRuns wait 10 s each: always one in flight
        controller_pb2.SubmitExperimentsRequest(
            spec_yaml=spec_text("for-hung", 8, {"name": "hung"})
        ),
        timeout=30,
    )
    time.sleep(1.0)
    ids = set()
    for n in range(singles):
        reply = stub.SubmitExperiments(
            controller_pb2.SubmitExperimentsRequest(spec_yaml=spec_text(f"beside-hung{n}", 1)),
            timeout=30,
        )
        experiment_id = reply.experiments[0].id
        ids.add(experiment_id)
        while True:
            got = stub.GetExperiment(
                controller_pb2.GetExperimentRequest(id=experiment_id), timeout=10
            )
            if got.experiment.state == controller_pb2.EXPERIMENT_STATE_SUCCEEDED:
                break
            time.sleep(0.02)
    return ids


if __name__ == "__main__":
    raise SystemExit(main())
