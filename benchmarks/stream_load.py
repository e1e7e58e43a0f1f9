"""Unary latency on each daemon with 200 open streams, beside the same calls with none.

A real agent (following a fake server's log: ``StreamLogs follow``, what ``tunelab logs -f``
opens) and a real controller (``WatchExperiment`` on an experiment that waits, what
``tunelab submit --wait`` opens). Goal: unary p99 under 20 ms with 200 streams open.
Usage: python benchmarks/stream_load.py [--streams 200] [--calls 300]
Also run by benchmarks/controller_scale.py, into one table.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import servers
from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tests.support.ports import free_port
from tunelab.v1 import agent_pb2, controller_pb2, server_pb2

Row = tuple[str, str, str]
WAITING_SPEC = (
    "name: waits\nhost: {labels: {pool: nowhere}}\n"
    "server: {command: [e, '{port}'], ready: {model: m}}\n"
    "benchmark: {concurrency: [1], requests: 1}\n"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(call: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def open_streams(start: Callable[[], Any], count: int) -> list[Any]:
    streams = []
    for _ in range(count):
        call = start()
        next(call)  # running on the server
        streams.append(call)
    return streams


def latency_rows(
    daemon: str, method: str, call: Callable[[], object], start: Callable[[], Any], args: Any
) -> list[Row]:
    timed(call, 20)  # warm the channel
    idle = timed(call, args.calls)
    streams = open_streams(start, args.streams)
    try:
        time.sleep(1.0)  # every stream settled into its follow/poll loop
        loaded = timed(call, args.calls)
    finally:
        for stream in streams:
            stream.cancel()
    return [
        (f"{daemon} {method} p50 / p99, no streams",
         f"{statistics.median(idle):.1f} / {percentile(idle, 0.99):.1f} ms", ""),
        (f"{daemon} {method} p50 / p99, {args.streams} streams",
         f"{statistics.median(loaded):.1f} / {percentile(loaded, 0.99):.1f} ms", "p99 < 20 ms"),
    ]  # fmt: skip


def measure(args: Any, root: Path, controller: ControllerProcess | None = None) -> list[Row]:
    """The rows of this figure; uses ``controller`` when given (else starts its own)."""
    caps = {"TUNELAB_AGENT_MAX_STREAMS": str(args.streams + 8)}
    agent = AgentProcess(root / "stream-agent", env=caps).start()
    own = controller is None
    if controller is None:
        env = {"TUNELAB_CONTROLLER_MAX_STREAMS": str(args.streams + 8)}
        controller = ControllerProcess(root / "stream-controller", env=env).start()
    try:
        stub = agent.stub()
        server = servers.start(stub, servers.fake_spec(free_port(), "--load-seconds", "0.1"))
        servers.watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY])
        follow = agent_pb2.StreamLogsRequest(server_id=server.id, follow=True)
        rows = latency_rows(
            "agent",
            "GetInfo",
            lambda: stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=5),
            lambda: stub.StreamLogs(follow),
            args,
        )
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(agent.address))
        rows += latency_rows(
            "agent",
            "health",
            lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5),
            lambda: stub.StreamLogs(follow),
            args,
        )
        cstub = controller.stub()
        [waiting] = cstub.SubmitExperiments(
            controller_pb2.SubmitExperimentsRequest(spec_yaml=WAITING_SPEC), timeout=10
        ).experiments
        get = controller_pb2.GetExperimentRequest(id=waiting.id)
        watch = controller_pb2.WatchExperimentRequest(ids=[waiting.id])
        rows += latency_rows(
            "controller",
            "GetExperiment",
            lambda: cstub.GetExperiment(get, timeout=5),
            lambda: cstub.WatchExperiment(watch),
            args,
        )
        cstub.CancelExperiment(controller_pb2.CancelExperimentRequest(ids=[waiting.id]), timeout=5)
        return rows
    finally:
        stop_all_servers(agent)  # a server outlives its agent by design: end ours first
        agent.terminate()
        if own:
            controller.terminate()


def stop_all_servers(agent: AgentProcess) -> None:
    stub = agent.stub()
    with contextlib.suppress(grpc.RpcError):
        for server in stub.ListServers(agent_pb2.ListServersRequest(), timeout=10).servers:
            stub.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=2), timeout=30)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--calls", type=int, default=300, help="unary calls per figure")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tunelab-streams-"))
    try:
        rows = measure(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'figure':<52} {'value':>20} {'goal':>12}")
    for name, value, goal in rows:
        print(f"{name:<52} {value:>20} {goal:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
