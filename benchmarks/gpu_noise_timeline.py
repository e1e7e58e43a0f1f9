"""Launch noise and the timeline on a real GPU (issues 44 and 47): how much of the spread is the
launch's, and whether the timeline's power and clocks agree with nvidia-smi's.

One real agent and controller (SQLite) on the GPU host. One ordinary spec: ``torch_server.py``
at a fixed ``--max-batch`` (real GEMMs and attention per decode step), ``repeat: N`` launches,
two concurrencies per launch, each measured for ``--seconds`` after a warm-up by time, with the
timeline at 1 s. Per load, each launch's measured span is cut into blocks by the product's one
definition (``tunelab.analysis.timeline.blocks``) and the variance components between and within
launches are fitted by the product's model (``tunelab.analysis.variance.fit``). Beside the run,
``nvidia-smi --query-gpu=... -lms 1000`` samples power and clocks; each timeline window is set
against the nvidia-smi samples inside it. Writes ``noise.json``, ``power.json``, ``table.md``
and the logs under ``--out``. On the GPU host (the run tool)::

    PYTHONPATH=$PWD:$PWD/agent:$PWD/proto:$PWD/controller \\
        python3 benchmarks/gpu_noise_timeline.py --out $OUT

``--simulate`` runs the same pipeline against the simulator (no GPU, no nvidia-smi).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import yaml  # noqa: E402

from tests.support.agent_proc import AgentProcess  # noqa: E402
from tests.support.controller_proc import ControllerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tunelab.analysis.timeline.blocks import blocks  # noqa: E402
from tunelab.analysis.timeline.model import parse  # noqa: E402
from tunelab.analysis.variance import Launch, fit  # noqa: E402

SMI_FIELDS = "timestamp,power.draw,clocks.sm,clocks.mem,utilization.gpu"


def spec(args: argparse.Namespace) -> dict[str, Any]:
    if args.simulate:
        command: list[Any] = ["{python}", "-P", "-m", "tunelab.bench.simulator"]
        flags: dict[str, Any] = {"--port": "{port}", "--model": "torch-decode",
                                 "--max-num-seqs": args.batch, "--startup-seconds": 1}  # fmt: skip
    else:
        command = [args.server_python, str(HERE / "benchmarks" / "torch_server.py")]
        flags = {"--port": "{port}", "--max-batch": args.batch, "--hidden": 4096,
                 "--layers": 8, "--context": 1024}  # fmt: skip
    return {
        "name": "gpu-noise",
        "host": {"labels": {"pool": "gpu"}},
        "server": {
            "command": command,
            "flags": flags,
            "port": "auto",
            "ready": {"path": "/health", "model": "torch-decode", "timeout": "5m"},
            "stop_grace": "10s",
        },
        "benchmark": {
            "input_len": 32,
            "output_len": args.output_len,
            "concurrency": list(args.loads),
            "duration": f"{args.seconds}s",
            "warmup": f"{args.warmup}s",
            "timeline": {"step": "1s"},
        },
        "repeat": args.launches,
        "max_duration": "30m",
    }


def smi_samples(path: Path) -> list[tuple[float, float, float, float]]:
    """(unix seconds, watts, SM MHz, memory MHz) per nvidia-smi line."""
    out = []
    for row in csv.reader(path.read_text().splitlines()):
        if len(row) < 4:
            continue
        try:
            stamp = dt.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((stamp, float(row[1]), float(row[2]), float(row[3])))
        except ValueError:
            continue
    return out


def compare_power(
    timeline: dict[str, Any], samples: list[tuple[float, float, float, float]]
) -> dict[str, Any]:
    """Each timeline window's GPU 0 power and clocks against the mean of nvidia-smi's samples
    inside that window (the agent's clock and nvidia-smi's are the host's clock)."""
    start, step = float(timeline["start"]), float(timeline["step_seconds"])
    series = timeline["series"]
    pairs: dict[str, list[tuple[float, float]]] = {"power": [], "sm": [], "mem": []}
    names = {"power": ("gpu0.power_watts", 1, 1.0), "sm": ("gpu0.sm_clock_hertz", 2, 1e6),
             "mem": ("gpu0.memory_clock_hertz", 3, 1e6)}  # fmt: skip
    for key, (name, column, scale) in names.items():
        values = series.get(name) or []
        for k, value in enumerate(values):
            if value is None:
                continue
            lo, hi = start + k * step, start + (k + 1) * step
            inside = [s[column] for s in samples if lo <= s[0] < hi]
            if inside:
                pairs[key].append((float(value) / scale, statistics.fmean(inside)))
    out: dict[str, Any] = {}
    for key, got in pairs.items():
        if not got:
            continue
        diffs = [a - b for a, b in got]
        out[key] = {
            "windows": len(got),
            "timeline_mean": statistics.fmean(a for a, _ in got),
            "smi_mean": statistics.fmean(b for _, b in got),
            "timeline_max": max(a for a, _ in got),
            "smi_max": max(b for _, b in got),
            "mean_abs_diff": statistics.fmean(abs(d) for d in diffs),
            "correlation": _corr(got),
        }
    return out


def _corr(pairs: list[tuple[float, float]]) -> float | None:
    if len(pairs) < 3:
        return None
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    sx, sy = statistics.pstdev(xs), statistics.pstdev(ys)
    if sx == 0 or sy == 0:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in pairs) / (len(pairs) * sx * sy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="gpu-noise-"))
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--loads", type=lambda s: [int(x) for x in s.split(",")],
                        default=[16, 256])  # fmt: skip
    parser.add_argument("--launches", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=60, help="measured seconds per load")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up seconds per load")
    parser.add_argument("--block-seconds", type=float, default=10.0)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--server-python", default=sys.executable)
    parser.add_argument("--simulate", action="store_true", help="the simulator, no GPU")
    parser.add_argument("--deadline", type=float, default=1500, help="seconds")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-noise-work-"))
    spec_path = work / "noise.yaml"
    spec_path.write_text(yaml.safe_dump(spec(args), sort_keys=False))
    metrics = f"127.0.0.1:{free_port()}"
    agent = AgentProcess(work / "agent", ["--metrics-listen", metrics])
    controller = ControllerProcess(work / "controller")
    smi = None
    smi_path = out / "nvidia_smi.csv"
    if not args.simulate and shutil.which("nvidia-smi"):
        sink = smi_path.open("w")
        smi = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits",
             "-i", "0", "-lms", "1000"],
            stdout=sink, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    started = time.monotonic()
    agent.start(60)
    controller.start(60)
    try:
        controller.cli("hosts", "add", "gpu", agent.address, "--label", "pool=gpu",
                       "--metrics-url", f"http://{metrics}/metrics")  # fmt: skip
        time.sleep(2)
        submitted = controller.cli("submit", str(spec_path))
        print(submitted.stdout[-2000:], submitted.stderr[-2000:], flush=True)
        waited = controller.cli("wait", "gpu-noise", timeout=args.deadline)
        print(waited.stdout[-3000:], waited.stderr[-1000:], flush=True)
        listed = controller.cli_json("ls", "--group", "gpu-noise")
        shown = [controller.cli_json("show", e["id"], "--timeline") for e in listed]
        (out / "show.json").write_text(json.dumps(shown)[:15_000_000])
    finally:
        if smi is not None:
            smi.terminate()
            smi.wait(10)
        for name, proc in (("controller", controller), ("agent", agent)):
            (out / f"{name}.log").write_text(proc.log()[-200_000:])
            proc.terminate()
    total = time.monotonic() - started
    samples = smi_samples(smi_path) if smi_path.exists() else []
    by_load: dict[int, list[Launch]] = {c: [] for c in args.loads}
    whole: dict[int, list[float]] = {c: [] for c in args.loads}
    power: list[dict[str, Any]] = []
    events: list[str] = []
    for experiment in shown:
        for attempt in experiment.get("attempts") or []:
            if attempt.get("state") != "SUCCEEDED" or not attempt.get("timeline"):
                continue
            timeline = parse(attempt["timeline"])
            for index, concurrency in enumerate(args.loads):
                cut = blocks(timeline, index, args.block_seconds)
                values = tuple(b.output_throughput for b in cut if b.output_throughput > 0)
                if len(values) >= 2:
                    by_load[concurrency].append(Launch(f"c{concurrency}", values))
            for point in (attempt.get("result") or {}).get("points") or []:
                c = int(point.get("concurrency") or 0)
                if c in whole and point.get("output_throughput"):
                    whole[c].append(float(point["output_throughput"]))
            if samples:
                power.append(compare_power(attempt["timeline"], samples))
            events += [f"{e.get('kind')} at {e.get('at_s')} s" for e in attempt["timeline_events"]]
    noise: dict[str, Any] = {}
    head = (
        "| load | launches | blocks | launch CV | within-launch CV | whole-point CV | mean tok/s |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for concurrency, launches in by_load.items():
        components = fit(launches)
        per_launch = whole[concurrency]
        cv = (statistics.stdev(per_launch) / statistics.fmean(per_launch)
              if len(per_launch) > 1 else math.nan)  # fmt: skip
        noise[f"c{concurrency}"] = {
            "launches": len(launches),
            "blocks": sum(len(x.blocks) for x in launches),
            "launch_cv": components.launch_cv if components else None,
            "within_cv": components.within_cv if components else None,
            "negligible": components.negligible if components else None,
            "whole_point_values": per_launch,
            "block_values": [list(x.blocks) for x in launches],
        }
        lines.append(
            f"| c={concurrency} | {len(launches)} | {noise[f'c{concurrency}']['blocks']} | "
            + (
                f"{components.launch_cv:.2%} | {components.within_cv:.2%} | "
                if components
                else "- | - | "
            )
            + f"{cv:.2%} | {statistics.fmean(per_launch) if per_launch else 0:.0f} |"
        )
    lines += [
        "",
        (
            "| GPU 0, per 1 s window | windows | timeline mean | nvidia-smi mean | timeline max | "
            "nvidia-smi max | mean abs diff | correlation |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    units = {"power": "W", "sm": "MHz", "mem": "MHz"}
    for key, unit in units.items():
        rows = [p[key] for p in power if key in p]
        if not rows:
            continue
        n = sum(r["windows"] for r in rows)
        corr = [r["correlation"] for r in rows if r["correlation"] is not None]
        lines.append(
            f"| {key} ({unit}) | {n} | {statistics.fmean(r['timeline_mean'] for r in rows):.1f} "
            f"| {statistics.fmean(r['smi_mean'] for r in rows):.1f} | "
            f"{max(r['timeline_max'] for r in rows):.1f} | {max(r['smi_max'] for r in rows):.1f} | "
            f"{statistics.fmean(r['mean_abs_diff'] for r in rows):.2f} | "
            + (f"{statistics.fmean(corr):.3f} |" if corr else "- |")
        )
    lines += ["", f"events: {', '.join(events) or 'none'}", f"total {total:.0f} s"]
    table = "\n".join(lines)
    (out / "noise.json").write_text(json.dumps(noise, indent=1))
    (out / "power.json").write_text(json.dumps(power, indent=1))
    (out / "table.md").write_text(table + "\n")
    print(table, flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    raise SystemExit(main())
