"""How long a full host audit takes on a big host: 128 CPUs, 8 GPUs behind PCIe switches.

The host is a fixture tree built from real pieces (tests/fixtures/audit/scenarios.big_host: the
H200's config space and /proc files, the PLX switch and Intel root port from pciutils' dumps, a
real Xeon's idle-state table on every CPU), and the GPUs answer from the H200's NVML snapshot
replicated per GPU. Every run builds a fresh AuditContext, so nothing is cached between runs
except what the kernel caches for any reader. Goal: under 200 ms.

    python benchmarks/audit_speed.py [--runs 30]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fixtures.audit.hostbuilder import H200_ROOT
from tests.fixtures.audit.scenarios import big_host
from tunelab.agent.audit.capture import make_nodes
from tunelab.agent.audit.checks import CHECKS
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.runner import run_check
from tunelab.agent.gpu import SnapshotBackend
from tunelab.agent.system import System

GOAL_MS = 200.0


def snapshot_for(bdfs: list[str]) -> SnapshotBackend:
    """The H200's captured NVML answers, one copy per fixture GPU (only the bus id differs)."""
    captured = json.loads((H200_ROOT.parent / "nvml.json").read_text())
    devices = []
    for index, bdf in enumerate(bdfs):
        device = copy.deepcopy(captured["devices"][0])
        device["index"] = index
        device["fields"]["pci_bus_id"] = "0000" + bdf
        devices.append(device)
    return SnapshotBackend({**captured, "devices": devices})


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="audit-speed-") as tmp:
        root = Path(tmp) / "root"
        bdfs = big_host(root)
        if os.geteuid() == 0:
            make_nodes(root)
        gpu = snapshot_for(bdfs)
        totals: list[float] = []
        per_check: dict[str, list[float]] = defaultdict(list)
        statuses: dict[str, str] = {}
        for _ in range(args.runs):
            ctx = AuditContext(System(root), gpu)
            start = time.perf_counter()
            for check in CHECKS:
                begin = time.perf_counter()
                result = run_check(check, ctx)
                per_check[check.id].append((time.perf_counter() - begin) * 1000)
                statuses[check.id] = result.status.value
            totals.append((time.perf_counter() - start) * 1000)
        files = sum(1 for _ in root.rglob("*"))
    first, warm = totals[0], totals[1:] or totals
    print(f"audit_speed: 128 CPUs, {len(bdfs)} GPUs behind 4 switches, {files} fixture paths")
    print(f"{'measure':<28}{'ms':>10}")
    print(f"{'first run':<28}{first:>10.1f}")
    print(f"{'median of next runs':<28}{statistics.median(warm):>10.1f}")
    print(f"{'p95 of next runs':<28}{percentile(warm, 0.95):>10.1f}")
    print(f"{'max of all runs':<28}{max(totals):>10.1f}")
    print(f"{'goal':<28}{GOAL_MS:>10.1f}")
    print()
    print(f"{'check (median ms)':<28}{'ms':>10}  status")
    ranked = sorted(per_check.items(), key=lambda item: -statistics.median(item[1]))
    for check_id, values in ranked[:8]:
        print(f"{check_id:<28}{statistics.median(values):>10.2f}  {statuses[check_id]}")
    verdict = "PASS" if max(totals) < GOAL_MS else "OVER GOAL"
    print(f"\n{verdict}: worst full audit {max(totals):.1f} ms (goal < {GOAL_MS:.0f} ms)")
    return 0 if max(totals) < GOAL_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
