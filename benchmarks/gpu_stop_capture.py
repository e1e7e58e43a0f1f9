"""On a real NVIDIA host: start a server that holds GPU memory (parent + worker processes)
through a real agent, stop it, and record how long until NVML shows the memory free.

Writes a JSON capture and prints a table. Scenarios:
  cooperative   exits on SIGTERM (8 GiB in the server + 2 workers x 4 GiB)
  stubborn      ignores SIGTERM everywhere; SIGKILL after a 2 s grace
  escaped       stubborn, and the workers left through ``setsid env -i`` (own session, no
                environment, reparented to the server's monitor)
Besides NVML, an independent 1 ms psutil poll times when the last process of the tree is gone;
the server's monitor (its parent) is recorded with its RSS.
Usage: python benchmarks/gpu_stop_capture.py --out capture.json
       python benchmarks/gpu_stop_capture.py --out dry.json --dry-run   # no GPU: host memory
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import start, watch_until
from tunelab.agent.gpu import GpuBackend, NvmlBackend, as_int, open_backend
from tunelab.v1 import agent_pb2, server_pb2

GPU_SERVER = Path(__file__).resolve().parent / "gpu_server.py"


def used_bytes(gpu: GpuBackend) -> int:
    if not gpu.available():
        return 0  # dry run: no NVML witness
    return sum(as_int(gpu.read(i, "memory_used_bytes")) or 0 for i in range(gpu.device_count()))


class MemorySampler(threading.Thread):
    """Polls NVML memory used every 10 ms: the independent witness of the release."""

    def __init__(self, gpu: GpuBackend) -> None:
        super().__init__(daemon=True)
        self.gpu = gpu
        self.samples: list[tuple[float, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            used = used_bytes(self.gpu)
            self.samples.append((time.time(), used))
            self.stop_event.wait(0.01)


def tree_pids(server_pid: int) -> list[psutil.Process]:
    """The server, its children, and workers that escaped to its monitor (their subreaper)."""
    root = psutil.Process(server_pid)
    procs = [root, *root.children(recursive=True)]
    parent = root.parent()
    if parent is not None and "tunelab.agent.procs.monitor" in parent.cmdline():
        known = {p.pid for p in procs}
        procs += [p for p in parent.children(recursive=True) if p.pid not in known]
    return procs


def all_gone(procs: list[psutil.Process]) -> bool:
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def scenario(
    agent: AgentProcess, gpu: GpuBackend, name: str, extra: list[str], grace: float, dry: bool
) -> dict[str, Any]:
    stub = agent.stub()
    baseline = used_bytes(gpu)
    port = free_port()
    argv = [
        sys.executable,
        str(GPU_SERVER),
        "--port",
        str(port),
        "--gib",
        "8",
        "--workers",
        "2",
        *(["--cpu", "--gib", "0.25", "--worker-gib", "0.125"] if dry else []),
        *extra,
    ]
    spec = server_pb2.ServerSpec(
        argv=argv, port=port, stop_grace_seconds=grace, startup_timeout_seconds=300
    )
    server = start(stub, spec)
    ready = watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY], timeout=300)[-1]
    time.sleep(3.0)  # let the workers finish allocating
    held = used_bytes(gpu)
    procs = gpu.compute_processes() if gpu.available() else []
    tree = tree_pids(server.pid)
    monitor = psutil.Process(server.pid).parent()
    monitor_rss = monitor.memory_info().rss if monitor is not None else 0
    monitor_cmd = " ".join(monitor.cmdline()) if monitor is not None else ""
    sampler = MemorySampler(gpu)
    sampler.start()
    t_stop = time.time()
    future = stub.StopServer.future(agent_pb2.StopServerRequest(id=server.id), timeout=grace + 120)
    while not all_gone(tree) and time.time() - t_stop < grace + 60:
        time.sleep(0.001)
    t_gone = time.time()
    stopped = future.result().server
    t_reply = time.time()
    time.sleep(0.5)
    sampler.stop_event.set()
    sampler.join()
    threshold = baseline + 256 * 2**20
    free_at = next((t for t, used in sampler.samples if t >= t_stop and used <= threshold), None)
    return {
        "scenario": name,
        "state": server_pb2.ServerState.Name(stopped.state),
        "message": stopped.message,
        "ready_seconds": ready.ready_seconds,
        "gpu_processes_before_stop": len(procs),
        "descendants_recorded": len(stopped.descendants),
        "tree_processes": len(tree),
        "last_process_gone_seconds": round(t_gone - t_stop, 4) if all_gone(tree) else None,
        "monitor": monitor_cmd,
        "monitor_rss_bytes": monitor_rss,
        "memory_baseline_bytes": baseline,
        "memory_held_bytes": held,
        "stop_rpc_seconds": round(t_reply - t_stop, 4),
        "nvml_memory_free_seconds": round(free_at - t_stop, 4) if free_at else None,
        "memory_samples_after_stop": [(round(t - t_stop, 3), u) for t, u in sampler.samples[::5]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--dry-run", action="store_true", help="no GPU: workers hold host memory; NVML unused"
    )
    args = parser.parse_args(argv)
    gpu: GpuBackend = NvmlBackend() if not args.dry_run else open_backend(None)
    if not args.dry_run and not gpu.available():
        print(f"needs an NVIDIA GPU: {gpu.unavailable_reason()}", file=sys.stderr)
        return 1
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        agent = AgentProcess(Path(tmp) / "agent").start()
        try:
            dry = args.dry_run
            results.append(scenario(agent, gpu, "cooperative", [], 30.0, dry))
            results.append(scenario(agent, gpu, "stubborn", ["--ignore-sigterm"], 2.0, dry))
            escaped = ["--ignore-sigterm", "--escape-workers"]
            results.append(scenario(agent, gpu, "escaped", escaped, 2.0, dry))
        finally:
            agent.terminate()
            print(agent.log()[-3000:], file=sys.stderr)
    capture = {
        "gpu": gpu.system() if gpu.available() else {},
        "name": gpu.read(0, "name") if gpu.available() else "dry run (no GPU)",
        "results": results,
    }
    args.out.write_text(json.dumps(capture, indent=1) + "\n")
    header = ("scenario", "state", "held GiB", "procs", "tree", "stop RPC", "all gone", "NVML free")
    widths = (-12, -20, 8, 5, 4, 9, 9, 10)
    print(
        " ".join(
            f"{h:<{-w}}" if w < 0 else f"{h:>{w}}" for h, w in zip(header, widths, strict=True)
        )
    )
    for r in results:
        free = r["nvml_memory_free_seconds"] if gpu.available() else None
        gone = r["last_process_gone_seconds"]
        print(
            f"{r['scenario']:<12} {r['state']:<20} {r['memory_held_bytes'] / 2**30:>8.1f} "
            f"{r['gpu_processes_before_stop']:>5} {r['tree_processes']:>4} "
            f"{r['stop_rpc_seconds']:>8.2f}s "
            f"{(f'{gone:.2f}s' if gone is not None else 'never'):>9} "
            f"{(f'{free:.2f}s' if free is not None else ('n/a' if args.dry_run else 'never')):>10}"
        )
        print(f"  {r['message']}")
        print(f"  monitor RSS {r['monitor_rss_bytes'] / 2**20:.1f} MiB: {r['monitor'][:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
