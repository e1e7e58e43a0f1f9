"""Agent CPU with live servers and no scrapes (issue 22 item 9; goal: under 0.3 % of a core per
live server on the H200).

One real agent (``tunelab-agent serve``, metrics on a port nobody scrapes), then 0, 1 and 8 READY
servers that answer their readiness path and do nothing else (a stdlib HTTP server, so the figure
is the agent's own supervision cost, not an engine's). For each count: settle, then the agent's
CPU time (user + system, all threads) over a window, as a share of one core; the monitors' CPU
beside it, summed.

Runs against any source checkout, so the same script measures before and after a change:
  python benchmarks/agent_cpu.py [--repo DIR] [--counts 0,1,8] [--seconds 30] [--label L]
``--repo`` puts that checkout's ``agent``, ``proto`` and ``controller`` folders first on the
agent's PYTHONPATH (its monitors inherit it); this checkout's tests/support drives it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import grpc  # noqa: E402
import psutil  # noqa: E402

from tests.support import servers  # noqa: E402
from tests.support.agent_proc import AgentProcess  # noqa: E402
from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2  # noqa: E402

SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def monitors(agent: psutil.Process) -> list[psutil.Process]:
    found = []
    for child in agent.children():
        try:
            if any("monitor" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def measure(agent: psutil.Process, seconds: float) -> tuple[float, float]:
    """(agent CPU, monitors' CPU), each as a share of one core over ``seconds``."""
    mons = monitors(agent)
    a0, m0 = cpu_seconds(agent), sum(cpu_seconds(m) for m in mons)
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    a1, m1 = cpu_seconds(agent), sum(cpu_seconds(m) for m in mons)
    return (a1 - a0) / elapsed, (m1 - m0) / elapsed


def start_ready(stub: agent_pb2_grpc.AgentStub, index: int) -> None:
    port = free_port()
    spec = server_pb2.ServerSpec(
        argv=[sys.executable, "-c", SERVER, str(port)], port=port, name=f"idle-{index}"
    )
    server = servers.start(stub, spec)
    seen = servers.watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY], timeout=60)
    if seen[-1].state != server_pb2.SERVER_STATE_READY:
        raise SystemExit(f"server {index} did not get READY: {seen[-1].message}")


def run(repo: Path, counts: list[int], seconds: float, settle: float) -> list[dict[str, Any]]:
    roots = [str(repo / part) for part in ("agent", "proto", "controller")]
    env = {"PYTHONPATH": os.pathsep.join([*roots, os.environ.get("PYTHONPATH", "")])}
    rows = []
    with tempfile.TemporaryDirectory(prefix="agent-cpu-") as tmp:
        metrics = ["--metrics-listen", f"127.0.0.1:{free_port()}", "--log-level", "warning"]
        agent = AgentProcess(Path(tmp) / "agent", extra_args=metrics, env=env).start()
        try:
            stub = agent.stub()
            if agent.proc is None:
                raise SystemExit("the agent did not start")
            proc = psutil.Process(agent.proc.pid)
            live = 0
            for count in counts:
                while live < count:
                    start_ready(stub, live)
                    live += 1
                time.sleep(settle)
                agent_cpu, monitor_cpu = measure(proc, seconds)
                rows.append({"servers": count, "agent": agent_cpu, "monitors": monitor_cpu})
            for listed in stub.ListServers(agent_pb2.ListServersRequest(), timeout=10).servers:
                try:
                    stub.StopServer(agent_pb2.StopServerRequest(id=listed.id), timeout=60)
                except grpc.RpcError as exc:
                    print(f"stop {listed.id}: {exc}\n{agent.log()[-3000:]}", file=sys.stderr)
        finally:
            agent.terminate()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", type=Path, default=HERE)
    parser.add_argument("--counts", default="0,1,8")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    counts = sorted(int(c) for c in args.counts.split(","))
    rows = run(args.repo.resolve(), counts, args.seconds, args.settle)
    base = next((r["agent"] for r in rows if r["servers"] == 0), None)
    print(f"# {args.label or args.repo}: {args.seconds:g} s windows, no scrapes, {os.uname()[1]}")
    print(
        f"{'servers':>7} {'agent % core':>12} {'per server':>10} {'over idle':>10} {'monitors':>9}"
    )
    for row in rows:
        n = row["servers"]
        per = f"{100 * row['agent'] / n:.3f}" if n else "-"
        over = f"{100 * (row['agent'] - base) / n:.3f}" if n and base is not None else "-"
        print(
            f"{n:>7} {100 * row['agent']:>12.3f} {per:>10} {over:>10} "
            f"{100 * row['monitors']:>8.3f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
