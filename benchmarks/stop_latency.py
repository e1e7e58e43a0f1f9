"""Stop latency: from the StopServer call until the last process of the server's tree is gone,
through a real agent, for three servers — one that exits on SIGTERM, one that ignores it (the
grace runs out, then SIGKILL), one whose grandchildren escaped (``setsid env -i``, SIGTERM
ignored). Median and p99 over N stops each; then the monitor's RSS and CPU per server.

"Gone" is seen by an independent 1 ms psutil poll of every pid the tree had before the stop
(a zombie counts as gone). A process still alive 2 s after the reply survived the stop.

Runs against any checkout, so the same script measures before and after a change:
  python benchmarks/stop_latency.py [--repo DIR] [--stops 20] [--grace 1.0]
(``--repo`` puts that checkout's tests/support first on sys.path; run it with that checkout's
interpreter so its agent is the one measured.)
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SERVER = r"""
import os, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port, mode = int(sys.argv[1]), sys.argv[2]
SLEEPER = ("import os,signal,time;signal.signal(signal.SIGTERM,signal.SIG_IGN);"
           "print('escaped', os.getpid(), flush=True);time.sleep(100000)")
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "escaped":
    for _ in range(2):
        argv = ["setsid", "env", "-i", sys.executable, "-c", SLEEPER]
        subprocess.run([sys.executable, "-c", f"import subprocess;subprocess.Popen({argv!r})"])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
httpd = HTTPServer(("127.0.0.1", port), H)
print("serving", os.getpid(), flush=True)
httpd.serve_forever()
"""


SURVIVOR_WAIT = 2.0  # alive this long after the reply: it survived the stop


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def tree_of(psutil: Any, pid: int, log: bytes) -> list[Any]:
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    for found in re.findall(rb"escaped (\d+)", log):
        procs.append(psutil.Process(int(found)))
    return procs


def all_gone(psutil: Any, procs: list[Any]) -> bool:
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def one_stop(env: dict[str, Any], mode: str, grace: float) -> dict[str, Any]:
    psutil, servers, free_port = env["psutil"], env["servers"], env["free_port"]
    stub, pb = env["stub"], env["pb"]
    port = free_port()
    spec = env["server_pb2"].ServerSpec(
        argv=[sys.executable, "-c", SERVER, str(port), mode],
        port=port,
        stop_grace_seconds=grace,
        startup_timeout_seconds=60,
    )
    server = servers.start(stub, spec)
    servers.watch_until(stub, server.id, [env["server_pb2"].SERVER_STATE_READY])
    deadline = time.monotonic() + 10
    want = 2 if mode == "escaped" else 0
    while True:  # wait until the escaped grandchildren have announced themselves
        log, _, _ = servers.logs(stub, server.id)
        if log.count(b"escaped ") >= want or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    procs = tree_of(psutil, server.pid, log)
    future = stub.StopServer.future(pb.StopServerRequest(id=server.id), timeout=120)
    t0 = time.perf_counter()
    t_reply: float | None = None
    while not all_gone(psutil, procs):
        now = time.perf_counter() - t0
        if t_reply is None and future.done():
            t_reply = now
        if t_reply is not None and now - t_reply > SURVIVOR_WAIT:
            break
        time.sleep(0.001)
    t_gone = time.perf_counter() - t0
    reply = future.result()
    if t_reply is None:
        t_reply = time.perf_counter() - t0
    survivors = [p for p in procs if not all_gone(psutil, [p])]
    for proc in survivors:  # our own test processes; psutil checks the create time on kill
        proc.kill()
    return {
        "gone": None if survivors else t_gone,
        "reply": t_reply,
        "survivors": len(survivors),
        "processes": len(procs),
        "state": env["server_pb2"].ServerState.Name(reply.server.state),
    }


def monitor_cost(env: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """RSS and CPU of one server's monitor while the server is READY and idle."""
    psutil, servers, stub = env["psutil"], env["servers"], env["stub"]
    port = env["free_port"]()
    spec = env["server_pb2"].ServerSpec(
        argv=[sys.executable, "-c", SERVER, str(port), "cooperative"], port=port
    )
    server = servers.start(stub, spec)
    servers.watch_until(stub, server.id, [env["server_pb2"].SERVER_STATE_READY])
    parent = psutil.Process(server.pid).parent()
    try:
        if parent is None or not any("monitor" in a for a in parent.cmdline()):
            return None  # no monitor process in this checkout
        before = parent.cpu_times()
        time.sleep(seconds)
        after = parent.cpu_times()
        cpu = (after.user + after.system) - (before.user + before.system)
        memory = parent.memory_full_info()
        return {"rss": memory.rss, "uss": memory.uss, "cpu_ratio": cpu / seconds}
    finally:
        stub.StopServer(env["pb"].StopServerRequest(id=server.id, grace_seconds=5), timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--stops", type=int, default=20)
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.repo))
    import psutil

    from tests.support import servers
    from tests.support.agent_proc import AgentProcess
    from tests.support.ports import free_port
    from tunelab.v1 import agent_pb2, server_pb2

    with tempfile.TemporaryDirectory() as tmp:
        agent = AgentProcess(Path(tmp) / "agent").start()
        env = {
            "psutil": psutil,
            "servers": servers,
            "free_port": free_port,
            "stub": agent.stub(),
            "pb": agent_pb2,
            "server_pb2": server_pb2,
        }
        try:
            rows = []
            for mode in ("cooperative", "stubborn", "escaped"):
                runs = [one_stop(env, mode, args.grace) for _ in range(args.stops)]
                rows.append((mode, runs))
            cost = monitor_cost(env, args.idle_seconds)
        finally:
            agent.terminate()
    label = args.label or str(args.repo)
    print(f"# {label}: {args.stops} stops each, grace {args.grace:g} s; times from StopServer")
    print(
        f"{'server':<12} {'gone median':>11} {'gone p99':>9} {'reply median':>12} "
        f"{'survived':>9} {'procs':>5}  final state"
    )
    for mode, runs in rows:
        gone = [r["gone"] for r in runs if r["gone"] is not None]
        replies = [r["reply"] for r in runs]
        survived = sum(1 for r in runs if r["survivors"])
        states = sorted({r["state"].removeprefix("SERVER_STATE_") for r in runs})
        g_med = f"{statistics.median(gone):.3f}s" if gone else "never"
        g_p99 = f"{percentile(gone, 0.99):.3f}s" if gone else "never"
        print(
            f"{mode:<12} {g_med:>11} {g_p99:>9} {statistics.median(replies):>11.3f}s "
            f"{survived:>5}/{len(runs):<3} {runs[0]['processes']:>5}  {','.join(states)}"
        )
    if cost is None:
        print("monitor: none (servers are the agent's own children in this checkout)")
    else:
        print(
            f"monitor per server: RSS {cost['rss'] / 2**20:.1f} MiB (USS "
            f"{cost['uss'] / 2**20:.1f} MiB), CPU {100 * cost['cpu_ratio']:.3f} % of a core "
            f"idle over {args.idle_seconds:g} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
