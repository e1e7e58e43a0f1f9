"""Where `make demo`'s time goes, step by step, beside the same demo at the controller's default
polling cadence (host every 5 s, attempts every 2 s): the peer is what the demo did before.

Each run is a fresh `python -P -m tunelab.controller.demo` (the `.venv` already installed); a
step's time is from its `==` heading to the next one's. Numbers from a shared 2-core VM vary by
a few seconds between runs: pin with taskset and repeat.

    taskset -c 0,1 python benchmarks/demo_time.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = "from tunelab.controller.demo import main; raise SystemExit(main(fast_polls={fast}))"


def run_once(fast: bool) -> dict[str, float]:
    """Seconds per demo step (and "total") for one run."""
    argv = [sys.executable, "-P", "-c", CODE.format(fast=fast)]
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    steps: dict[str, float] = {}
    step, since = "python start", started
    for line in proc.stdout:
        if line.startswith("== "):
            now = time.monotonic()
            steps[step] = steps.get(step, 0.0) + now - since
            step, since = line[3:].strip().split(":")[0][:48], now
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"the demo failed (exit {proc.returncode})")
    steps["total"] = time.monotonic() - started
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant (default 3)")
    args = parser.parse_args()
    results: dict[bool, dict[str, list[float]]] = {
        True: defaultdict(list),
        False: defaultdict(list),
    }
    order: list[str] = []
    for _ in range(args.runs):
        for fast in (True, False):  # interleaved, so machine load falls on both alike
            for step, seconds in run_once(fast).items():
                results[fast][step].append(seconds)
                if step not in order:
                    order.append(step)
    print(f"make demo, median of {args.runs} runs (seconds)\n")
    print("| step | tunelab demo now | default cadence (before) |")
    print("|---|---:|---:|")
    for step in order:
        now, before = results[True].get(step, []), results[False].get(step, [])
        cells = [f"{statistics.median(v):.1f}" if v else "-" for v in (now, before)]
        print(f"| {step} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
