"""E2E: the job `make demo` runs (python -m controller.demo), start to finish."""

from __future__ import annotations

import subprocess
import sys

from tests.support.agent_proc import REPO


def test_demo_runs_the_main_job_end_to_end() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller.demo"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Loading safetensors checkpoint shards" in out
    assert "READY in" in out
    assert "STOPPED: stop requested" in out
    assert out.rstrip().endswith("demo done")
