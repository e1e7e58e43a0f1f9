"""Run the real audit on this host and capture everything it read as a fixture tree.

On a GPU host, as root:  python benchmarks/capture_host_tree.py --out /tmp/h200
writes ``report.json`` (the live audit, exactly what ``tunelab-agent audit --json`` prints),
``nvml.json`` (an NVML snapshot: the GPU side of the same moment) and ``root/`` (the sysfs,
procfs, /etc and /dev facts the audit read, sysfs symlinks kept, device numbers and open()
results recorded under ``root/.tunelab-capture``). ``audit --root root --nvml-snapshot nvml.json``
then reproduces the report on any machine (device nodes need root to recreate).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunelab.agent.audit.capture import RecordingSystem, write_tree
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.cudaprobe import RECORD
from tunelab.agent.audit.runner import run_audit
from tunelab.agent.gpu import GpuBackend, capture_snapshot, open_backend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="directory to create")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpu: GpuBackend = open_backend()
    system = RecordingSystem("/")
    start = time.perf_counter()
    ctx = AuditContext(system, gpu)
    report = run_audit(ctx)
    elapsed = time.perf_counter() - start
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    # always written (without a GPU it holds the reason), so the replay command works as given
    snapshot = capture_snapshot(gpu)
    (args.out / "nvml.json").write_text(json.dumps(snapshot, indent=2, sort_keys=True) + "\n")
    probe = ctx.__dict__.get("cuda_init")  # recorded only if the audit ran the probe
    records = {RECORD: probe.to_json()} if probe is not None else {}
    manifest = write_tree(system, args.out / "root", records)
    print(
        f"audit {elapsed * 1000:.1f} ms; captured {manifest['files']} paths, "
        f"{manifest['listed']} listings, {manifest['nodes']} device nodes into {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
