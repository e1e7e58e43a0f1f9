"""E2E: the job `make demo` runs (python -m tunelab.controller.demo), start to finish."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.daemon_proc import REPO
from tests.support.health import wait_serving
from tests.support.ports import free_port
from tunelab.controller.demo import NEXT_STEP


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
    compare = out[out.index("$ tunelab compare") : out.index("== a watch every 5 s")]
    assert max(len(line) for line in compare.splitlines()) <= 100
    # the watch: its baseline, then an occurrence judged against it, shown by `watch show`
    watch = out[out.index("$ tunelab watch show demo-watch") :]
    assert "#1 " in watch and ": baseline (2/2 launches)" in watch, watch[:2000]
    # the first two occurrences pool into the baseline (3 launches a metric), the third is judged
    assert re.search(r"#[23] .*against #1(-#2)? \(2/2 launches\)", watch), watch[:2000]
    assert "    output_throughput " in watch and "    p99_ttft_ms " in watch
    assert ": running (" not in watch, watch[:2000]  # paused, and its last occurrence judged
    assert "effect of --itl-ms=5 against the baseline (3 baseline, 3 variant launches)" in out
    assert "effect of --tag=no-op against the baseline" in out
    found = re.search(r"^== demo done; the report: (\S+report\.html)$", out, re.MULTILINE)
    assert found, out[-2000:]
    report = Path(found.group(1))
    try:
        assert report.stat().st_size > 10_000 and "<svg" in report.read_text()
        # the logs it printed are still there, and it says what to do next
        for log in re.findall(r"\(log: (\S+)\)", out):
            assert Path(log).is_file() and Path(log).parent == report.parent, log
        tail = out[found.end() :]
        assert "the daemons' logs:" in tail and "next, on a GPU host of your own:" in tail
        assert "tunelab hosts add gpu1 HOST:50051 --agent-token-file agent.token" in tail
    finally:
        shutil.rmtree(report.parent)


def test_the_next_step_agent_line_starts_an_agent_as_written(tmp_path: Path) -> None:
    """The hint's `serve` line, run as printed (only the state dir and the two ports made this
    test's own): it listens beyond loopback, so it must carry what the agent requires there."""
    (line,) = [s.strip() for s in NEXT_STEP.splitlines() if "tunelab-agent serve" in s]
    (tmp_path / "agent.token").write_text("a-token-of-the-next-step\n")
    (tmp_path / "agent.token").chmod(0o600)
    port, metrics = free_port(), free_port()
    argv = line.replace(":50051", f":{port}").replace(":9473", f":{metrics}").split()
    argv[0] = str(Path(sys.executable).with_name("tunelab-agent"))
    argv += ["--state-dir", str(tmp_path / "state")]
    log = tmp_path / "agent.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_serving(f"127.0.0.1:{port}", proc, 30, "the next step's agent", log.read_text)
    finally:
        proc.terminate()
        proc.wait(30)
    assert '"event": "agent_listening"' in log.read_text()
