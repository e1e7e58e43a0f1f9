"""E2E: the job `make demo` runs (python -m tunelab.controller.demo), start to finish."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.daemon_proc import REPO


def test_demo_runs_the_main_job_end_to_end() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tunelab.controller.demo"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "local  127.0.0.1:" in out and "READY" in out  # the host registered and polled
    assert "PASS  numa.balancing" in out or "FAIL  numa.balancing" in out  # the audit ran
    for name in ("sim-ablation/baseline", "sim-ablation/--itl-ms=5", "sim-ablation/--tag=no-op"):
        for launch in (1, 2, 3):
            assert f"{name}#{launch}  SUCCEEDED" in out
    # the comparison table, then the effects of each change, each line within 100 columns
    compare = out[out.index("$ tunelab compare") :]
    assert max(len(line) for line in compare.splitlines()) <= 100
    assert "effect of --itl-ms=5 against the baseline (3 baseline, 3 variant launches)" in out
    assert "effect of --tag=no-op against the baseline" in out
    last = out.rstrip().splitlines()[-1]
    found = re.fullmatch(r"== demo done; the report: (\S+report\.html)", last)
    assert found, last
    report = Path(found.group(1))
    assert report.stat().st_size > 10_000 and "<svg" in report.read_text()
    report.unlink()
    report.parent.rmdir()
