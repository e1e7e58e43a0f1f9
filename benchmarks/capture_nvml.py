"""Capture an NVML snapshot (every field of agent.gpu, with per-field read cost) as fixture data.

Run on a real GPU host:  python benchmarks/capture_nvml.py --out h200-idle.json
With --busy-cmd, the snapshot is taken while that command runs (e.g. a matmul loop holding memory),
so fixtures carry a busy GPU's real clocks, power, throttle reasons and processes too.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunelab.agent.gpu import NvmlBackend, capture_snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--busy-cmd", help="command line (split with shlex, no shell) to run while capturing"
    )
    parser.add_argument(
        "--settle", type=float, default=8.0, help="seconds to let the busy load ramp"
    )
    args = parser.parse_args(argv)

    backend = NvmlBackend()
    if not backend.available():
        print(f"NVML unavailable: {backend.unavailable_reason()}", file=sys.stderr)
        return 1
    busy = None
    if args.busy_cmd:
        busy = subprocess.Popen(shlex.split(args.busy_cmd))
        time.sleep(args.settle)
    try:
        snapshot = capture_snapshot(backend)
        # read twice: the first read of some fields pays one-time driver costs
        snapshot["devices_second_read_cost_us"] = [
            d["read_cost_us"] for d in capture_snapshot(backend)["devices"]
        ]
    finally:
        if busy is not None:
            busy.terminate()
            busy.wait(30)
    snapshot["note"] = "busy" if busy is not None else "idle"
    args.out.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    print(json.dumps(snapshot["devices"][0]["fields"], indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
