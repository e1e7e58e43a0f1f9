"""Is tunelab's energy counter exact per run? Both energy modes against NVML's own counter.

Run on a GPU host (needs torch for the load):

    python benchmarks/energy_check.py --out-dir benchmarks/results

1. Cost: NVML's total-energy read and power read, wall and CPU time per call (median of 30).
2. Under a real load (``gpu_burn.py``: bf16 matmuls), steady and bursty (the load is paused
   and resumed every 2.5 s with SIGSTOP/SIGCONT), for each mode of the agent's metrics (a child
   process serving ``/metrics``): ``counter`` (the counter read every fast tick while the GPU
   has work) and ``power`` (power integrated every tick, the counter read every 15 s). Every
   ~1 s the harness scrapes ``/metrics`` and reads NVML's counter itself (before and after the
   scrape, averaged). For every pair of scrapes 10, 20 and 30 s apart (a run of that length),
   the error is the served counter's delta against NVML's delta. The sampler thread's CPU
   (``tunelab_agent_sampler_cpu_seconds_total``) gives each mode's cost. ``+live``: a scrape
   also reads the power at that moment to extrapolate (``energy_live_power``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RUN_LENGTHS = (10, 20, 30)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        body: bytes = reply.read()
    return body.decode()


def value(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def serve(port: int, energy_fast: bool, live: bool, snapshot: Path | None = None) -> int:
    """The child: the agent's metrics (sampler + endpoint) on the live GPU until SIGTERM."""
    from prometheus_client import CollectorRegistry

    from tunelab.agent.gpu import NvmlBackend, SnapshotBackend
    from tunelab.agent.metrics.app import AgentMetrics, MetricsSettings

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    metrics = AgentMetrics(
        MetricsSettings(
            listen=f"127.0.0.1:{port}", energy_fast=energy_fast, energy_live_power=live
        ),
        gpu=SnapshotBackend.load(snapshot) if snapshot else NvmlBackend(),
        list_servers=lambda include_finished: [],
        registry=CollectorRegistry(),
        last_audit=lambda: None,
        version="energy-check",
        instance_id="energy-check",
        started_at=time.time(),
    )
    metrics.start()
    stop.wait()
    metrics.close()
    return 0


def per_call(fn: Any, n: int = 30) -> tuple[float, float]:
    """Median wall and CPU milliseconds of one call."""
    walls, cpus = [], []
    for _ in range(n):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        cpus.append(time.thread_time() - c)
        walls.append(time.perf_counter() - w)
    return 1000 * statistics.median(walls), 1000 * statistics.median(cpus)


def errors(points: list[tuple[float, float, float]], length: float) -> list[float]:
    """Relative error of the served delta for every pair of points ``length`` (+1.5) s apart."""
    out = []
    for i, (t0, s0, e0) in enumerate(points):
        for t1, s1, e1 in points[i + 1 :]:
            if length <= t1 - t0 < length + 1.5 and e1 > e0:
                out.append((s1 - s0) / (e1 - e0) - 1)
    return out


def window(
    nvml: Any, handle: Any, mode: str, bursty: bool, burn: subprocess.Popen[bytes], seconds: float
) -> dict[str, Any]:
    port = 19000 + random.randrange(1000)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "proto"), str(REPO / "agent"), *filter(None, [env.get("PYTHONPATH")])]
    )
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)]
    argv += ["--energy-fast", "1" if mode.startswith("counter") else "0"]
    argv += ["--live-power", "1" if mode.endswith("+live") else "0"]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()

    def toggle() -> None:  # SIGSTOP/SIGCONT our own burn child: the load goes on and off
        paused = False
        while not stop.wait(2.5):
            burn.send_signal(signal.SIGCONT if paused else signal.SIGSTOP)
            paused = not paused
        burn.send_signal(signal.SIGCONT)

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if value(scrape(port), "tunelab_gpu_energy_joules_total") is not None:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        time.sleep(2)
        toggler = threading.Thread(target=toggle, daemon=True)
        if bursty:
            toggler.start()
        points: list[tuple[float, float, float]] = []
        first = scrape(port)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            e_before = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
            text = scrape(port)
            e_after = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0
            served = value(text, "tunelab_gpu_energy_joules_total")
            if served is not None:
                points.append((time.monotonic(), served, (e_before + e_after) / 2))
            time.sleep(0.7 + random.random() * 0.6)
        last = scrape(port)
        stop.set()
        if bursty:
            toggler.join()
    finally:
        child.terminate()
        child.wait(20)
    cpu = (value(last, "tunelab_agent_sampler_cpu_seconds_total") or 0) - (
        value(first, "tunelab_agent_sampler_cpu_seconds_total") or 0
    )
    elapsed = points[-1][0] - points[0][0] if len(points) > 1 else seconds
    result: dict[str, Any] = {
        "mode": mode,
        "load": "bursty" if bursty else "steady",
        "scrapes": len(points),
        "sampler_cpu_percent": round(100 * cpu / elapsed, 3),
        "mean_power_w": round((points[-1][2] - points[0][2]) / elapsed, 1) if points else None,
        "estimate_error_j": value(last, "tunelab_gpu_energy_estimate_error_joules"),
        "runs": {},
    }
    for length in RUN_LENGTHS:
        errs = sorted(abs(e) for e in errors(points, length))
        result["runs"][str(length)] = {
            "pairs": len(errs),
            "median_pct": round(100 * statistics.median(errs), 3) if errs else None,
            "p95_pct": round(100 * errs[int(0.95 * (len(errs) - 1))], 3) if errs else None,
            "max_pct": round(100 * errs[-1], 3) if errs else None,
        }
    return result


def table(cost: dict[str, float], rows: list[dict[str, Any]], env: dict[str, str]) -> str:
    lines = [
        "# Energy per run: tunelab's counter against NVML's",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
        "| NVML call | wall ms | CPU ms |",
        "|---|---:|---:|",
        (
            f"| nvmlDeviceGetTotalEnergyConsumption | {cost['energy_wall_ms']:.3f} "
            f"| {cost['energy_cpu_ms']:.3f} |"
        ),
        f"| nvmlDeviceGetPowerUsage | {cost['power_wall_ms']:.3f} | {cost['power_cpu_ms']:.3f} |",
        "",
        "| mode | load | mean W | sampler CPU % | "
        + " | ".join(f"{n} s runs: median / p95 / max error %" for n in RUN_LENGTHS)
        + " |",
        "|---|---|---:|---:|" + "---:|" * len(RUN_LENGTHS),
    ]
    for row in rows:
        cells = []
        for length in RUN_LENGTHS:
            r = row["runs"][str(length)]
            cells.append(
                f"{r['median_pct']} / {r['p95_pct']} / {r['max_pct']} (n={r['pairs']})"
                if r["pairs"]
                else "-"
            )
        lines.append(
            f"| {row['mode']} | {row['load']} | {row['mean_power_w']} "
            f"| {row['sampler_cpu_percent']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--window", type=float, default=40.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--energy-fast", default="1", help=argparse.SUPPRESS)
    parser.add_argument("--live-power", default="0", help=argparse.SUPPRESS)
    parser.add_argument("--nvml-snapshot", type=Path, help="--serve only: a dry run, no GPU")
    parser.add_argument(
        "--windows",
        default="counter:steady,counter:bursty,power:steady,power:bursty",
        help="mode:load pairs; modes counter, power, counter+live, power+live",
    )
    args = parser.parse_args(argv)
    if args.serve:
        live = args.live_power == "1"
        return serve(args.serve, args.energy_fast == "1", live, args.nvml_snapshot)
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    energy_wall, energy_cpu = per_call(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
    power_wall, power_cpu = per_call(lambda: pynvml.nvmlDeviceGetPowerUsage(handle))
    cost = {
        "energy_wall_ms": energy_wall,
        "energy_cpu_ms": energy_cpu,
        "power_wall_ms": power_wall,
        "power_cpu_ms": power_cpu,
    }
    env = {
        "gpu": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "cpus": str(os.cpu_count()),
    }
    burn = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "gpu_burn.py"), "--gib", "4"],
        stdout=subprocess.DEVNULL,
    )
    rows = []
    try:
        time.sleep(10)  # torch import, allocation, clocks up
        for pair in args.windows.split(","):
            mode, _, load = pair.partition(":")
            rows.append(window(pynvml, handle, mode, load == "bursty", burn, args.window))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        burn.send_signal(signal.SIGCONT)
        burn.terminate()
        burn.wait(30)
    text = table(cost, rows, env)
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / "energy_check.md").write_text(text)
        doc = {"environment": env, "cost": cost, "windows": rows}
        (args.out_dir / "energy_check.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
