"""Authenticated calls while strangers hold calls open without sending their request (issue 23.1).

A real agent and a real controller, each with ``--token-file``. Against each, a caller without
the token opens ``--headers-only`` calls whose request message never comes (the call's headers
go out, its iterator blocks) and ``--watches`` health ``Watch`` streams, spread over 10
connections; half the headers-only calls go to a method that needs the token, half to health
``Check``, which needs none. With those open, the token holder's unary calls are timed and
``tunelab ls`` is run.
Goal: GetInfo p99 < 20 ms, and ``tunelab ls`` exits 0. On the old edge 300 such calls made every
call time out at 5 s, and ``tunelab ls`` gave up after 30 s.
Usage: python benchmarks/silent_callers.py [--headers-only 1000] [--watches 1000] [--calls 300]
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tunelab.common.auth import ClientAuth
from tunelab.v1 import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc

TOKEN = "silent-callers-benchmark-token"  # noqa: S105 (a throwaway token for the run)
CONNECTIONS = 10
Row = tuple[str, str, str]


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


class Strangers:
    """Calls without the token: headers-only unary calls and health watches, held open."""

    def __init__(self, address: str, method: str) -> None:
        self.release = threading.Event()
        self.channels = [
            grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(CONNECTIONS)
        ]
        self.method = method
        self.calls: list[Any] = []

    def open(self, headers_only: int, watches: int) -> None:
        def never() -> Iterator[bytes]:
            self.release.wait(600)
            yield b""

        for i in range(headers_only):  # half to a guarded method, half to health Check (open)
            channel = self.channels[i % CONNECTIONS]
            method = self.method if i % 2 else "/grpc.health.v1.Health/Check"
            call: Any = channel.stream_unary(method)
            self.calls.append(call.future(never(), timeout=300))
        for i in range(watches):
            health = health_pb2_grpc.HealthStub(self.channels[i % CONNECTIONS])
            self.calls.append(health.Watch(health_pb2.HealthCheckRequest(), timeout=300))

    def outcome(self) -> str:
        """How the strangers' calls stand: still open, or ended with which code."""
        counts: collections.Counter[str] = collections.Counter()
        for call in self.calls:
            if not call.done():
                counts["open"] += 1
            else:
                code = call.code()
                counts[code.name if code else "?"] += 1
        return ", ".join(f"{n} {what}" for what, n in counts.most_common())

    def close(self) -> None:
        self.release.set()
        for call in self.calls:
            call.cancel()
        for channel in self.channels:
            channel.close()


def latency_row(name: str, call: Callable[[], object], n: int) -> Row:
    values = timed(call, n)
    value = f"{statistics.median(values):.1f} / {percentile(values, 0.99):.1f} ms"
    return (f"{name} p50 / p99", value, "p99 < 20 ms")


def measure(args: Any, root: Path) -> list[Row]:
    token_file = root / "token"
    token_file.write_text(TOKEN + "\n")
    agent = AgentProcess(root / "agent", ["--token-file", str(token_file)], token=TOKEN).start()
    controller = ControllerProcess(root / "controller", ["--token-file", str(token_file)]).start()
    rows: list[Row] = []
    try:
        auth = ClientAuth(token=TOKEN)
        astub = agent_pb2_grpc.AgentStub(auth.channel(agent.address))
        cstub = controller_pb2_grpc.ControllerStub(auth.channel(controller.address))
        get_info = lambda: astub.GetInfo(agent_pb2.GetInfoRequest(), timeout=5)  # noqa: E731
        list_exps = lambda: cstub.ListExperiments(  # noqa: E731
            controller_pb2.ListExperimentsRequest(), timeout=5
        )
        timed(get_info, 20)
        timed(list_exps, 20)
        rows.append(latency_row("agent GetInfo, nothing open", get_info, args.calls))
        strangers = [
            Strangers(agent.address, "/tunelab.v1.Agent/GetInfo"),
            Strangers(controller.address, "/tunelab.v1.Controller/ListExperiments"),
        ]
        try:
            for crowd in strangers:
                crowd.open(args.headers_only, args.watches)
            time.sleep(2.0)  # every call reached its daemon
            opened = f"{args.headers_only} headers-only + {args.watches} watches"
            rows.append(latency_row(f"agent GetInfo, {opened}", get_info, args.calls))
            rows.append(latency_row(f"controller ListExperiments, {opened}", list_exps, args.calls))
            env = {**os.environ, "TUNELAB_TOKEN": TOKEN, "TUNELAB_CONTROLLER": controller.address}
            t0 = time.perf_counter()
            ls = _ls(controller, env)
            ls_ms = (time.perf_counter() - t0) * 1000
            rows.append(("`tunelab ls` exit code / wall time", f"{ls} / {ls_ms:.0f} ms", "0"))
            rows.append(("agent: strangers' calls", strangers[0].outcome(), ""))
            rows.append(("controller: strangers' calls", strangers[1].outcome(), ""))
        finally:
            for crowd in strangers:
                crowd.close()
    finally:
        agent.terminate()
        controller.terminate()
    return rows


def _ls(controller: ControllerProcess, env: dict[str, str]) -> int:
    result = subprocess.run(
        [sys.executable, "-m", "tunelab.cli", "ls"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    return result.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--headers-only", type=int, default=1000)
    parser.add_argument("--watches", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per figure")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tunelab-silent-"))
    try:
        rows = measure(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'figure':<66} {'value':>52} {'goal':>12}")
    for name, value, goal in rows:
        print(f"{name:<66} {value:>52} {goal:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
