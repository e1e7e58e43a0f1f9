"""E2E: the job `make demo` runs (python -m tunelab.controller.demo), start to finish."""

from __future__ import annotations

import subprocess
import sys

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
    for name in (
        "sim-ablation/baseline",
        "sim-ablation/--itl-ms=5",
        "sim-ablation/--tokens-per-chunk=4",
    ):
        assert f"{name}  SUCCEEDED" in out
    assert "tok/s c=8" in out  # the comparison table
    assert out.rstrip().endswith("demo done")
