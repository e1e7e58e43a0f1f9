"""On a real NVIDIA host: start a server that holds GPU memory (parent + worker processes)
through a real agent, stop it, and record how long until NVML shows the memory free.

Writes a JSON capture and prints a table. Scenarios:
  cooperative   exits on SIGTERM (8 GiB in the server + 2 workers x 4 GiB)
  stubborn      ignores SIGTERM everywhere; the ladder must SIGKILL after a 2 s grace
Usage: python benchmarks/gpu_stop_capture.py --out capture.json
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

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import start, watch_until
from tunelab.agent.gpu import NvmlBackend, as_int
from tunelab.v1 import agent_pb2, server_pb2

GPU_SERVER = Path(__file__).resolve().parent / "gpu_server.py"


def used_bytes(gpu: NvmlBackend) -> int:
    return sum(as_int(gpu.read(i, "memory_used_bytes")) or 0 for i in range(gpu.device_count()))


class MemorySampler(threading.Thread):
    """Polls NVML memory used every 10 ms: the independent witness of the release."""

    def __init__(self, gpu: NvmlBackend) -> None:
        super().__init__(daemon=True)
        self.gpu = gpu
        self.samples: list[tuple[float, int]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            used = used_bytes(self.gpu)
            self.samples.append((time.time(), used))
            self.stop_event.wait(0.01)


def scenario(
    agent: AgentProcess, gpu: NvmlBackend, name: str, extra: list[str], grace: float
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
        *extra,
    ]
    spec = server_pb2.ServerSpec(
        argv=argv, port=port, stop_grace_seconds=grace, startup_timeout_seconds=300
    )
    server = start(stub, spec)
    ready = watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY], timeout=300)[-1]
    time.sleep(3.0)  # let the workers finish allocating
    held = used_bytes(gpu)
    procs = gpu.compute_processes()
    sampler = MemorySampler(gpu)
    sampler.start()
    t_stop = time.time()
    stopped = stub.StopServer(agent_pb2.StopServerRequest(id=server.id), timeout=grace + 120).server
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
    args = parser.parse_args(argv)
    gpu = NvmlBackend()
    if not gpu.available():
        print(f"needs an NVIDIA GPU: {gpu.unavailable_reason()}", file=sys.stderr)
        return 1
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        agent = AgentProcess(Path(tmp) / "agent").start()
        try:
            results.append(scenario(agent, gpu, "cooperative", [], grace=30.0))
            results.append(scenario(agent, gpu, "stubborn", ["--ignore-sigterm"], grace=2.0))
        finally:
            agent.terminate()
            print(agent.log()[-3000:], file=sys.stderr)
    capture = {"gpu": gpu.system(), "name": gpu.read(0, "name"), "results": results}
    args.out.write_text(json.dumps(capture, indent=1) + "\n")
    header = ("scenario", "state", "held GiB", "procs", "stop RPC", "NVML free")
    widths = (-12, -20, 8, 5, 9, 10)
    print(
        " ".join(
            f"{h:<{-w}}" if w < 0 else f"{h:>{w}}" for h, w in zip(header, widths, strict=True)
        )
    )
    for r in results:
        free = r["nvml_memory_free_seconds"]
        print(
            f"{r['scenario']:<12} {r['state']:<20} {r['memory_held_bytes'] / 2**30:>8.1f} "
            f"{r['gpu_processes_before_stop']:>5} {r['stop_rpc_seconds']:>8.2f}s "
            f"{(f'{free:.2f}s' if free is not None else 'never'):>10}"
        )
        print(f"  {r['message']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
