"""The bench process as the agent runs it: its own session, files only; a new reader (a restarted
agent) picks up the same progress; SIGTERM leaves a partial result; a bad config fails cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.bench.launcher import BenchFiles, bench_argv, spawn
from tunelab.bench.progress import ProgressReader
from tunelab.bench.simulator.process import SimulatorProcess


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulatorProcess]:
    with SimulatorProcess(["--ttft-ms", "20", "--itl-ms", "10"], tmp_path / "sim.log") as proc:
        yield proc


def config(url: str, **kw: object) -> BenchConfig:
    values: dict[str, object] = {
        "url": url,
        "model": "tunelab-sim",
        "concurrency": (2, 4),
        "requests": 8,
        "input_len": 8,
        "output_len": 20,
    }
    values.update(kw)
    return BenchConfig(**values).with_preset()  # type: ignore[arg-type]


def wait_for(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_progress_and_result_through_files(sim: SimulatorProcess, tmp_path: Path) -> None:
    files = BenchFiles(tmp_path / "run")
    proc = spawn(config(sim.url), files)
    assert os.getpgid(proc.pid) == proc.pid  # its own group: stopped as one, outlives the agent
    reader = ProgressReader(files.progress)
    wait_for(lambda: (reader.poll().latest or None) is not None)
    assert reader.state.latest is not None and reader.state.latest.point_count == 2
    assert proc.wait(30) == 0
    state = reader.poll()
    assert state.finished and state.error is None
    assert [p["point_index"] for p in state.points_done] == [0, 1]
    last = state.latest
    assert last is not None and last.phase == "done" and last.point_index == 1
    assert last.requests_done == 8 and last.requests_by_outcome == {"ok": 16}
    assert last.output_tokens_total == 16 * 20
    restarted = ProgressReader(files.progress).poll()  # a new agent reads the same story
    assert restarted.latest == last and restarted.finished
    doc = json.loads(files.result.read_text())
    assert doc["status"] == "completed" and len(doc["points"]) == 2
    assert len(files.requests.read_text().splitlines()) == 16


def test_sigterm_leaves_a_partial_result(sim: SimulatorProcess, tmp_path: Path) -> None:
    files = BenchFiles(tmp_path / "run")
    proc = spawn(config(sim.url, concurrency=(2, 2), requests=4, output_len=200), files)
    reader = ProgressReader(files.progress)
    wait_for(lambda: len(reader.poll().points_done) == 1)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 1
    state = reader.poll()
    assert state.error is not None and "SIGTERM" in state.error and not state.finished
    doc = json.loads(files.result.read_text())
    assert doc["status"] == "stopped by SIGTERM" and len(doc["points"]) == 2
    assert "interrupted" not in doc["points"][0] and doc["points"][1]["interrupted"] is True


def test_ctrl_c_mid_point_keeps_the_requests_that_finished(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT to the group, as a terminal sends it) halfway through the only point: the
    requests that completed are summarised and written, marked as an interrupted point."""
    files = BenchFiles(tmp_path / "run")
    proc = spawn(config(sim.url, concurrency=(1,), requests=50, output_len=20), files)
    reader = ProgressReader(files.progress)

    def two_done() -> bool:
        latest = reader.poll().latest  # poll() returns reader.state
        return latest is not None and latest.requests_done >= 2

    wait_for(two_done)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(10) == 1
    doc = json.loads(files.result.read_text())
    assert doc["status"] == "stopped by SIGINT"
    [point] = doc["points"]
    assert point["interrupted"] is True and 2 <= point["completed"] < 50
    assert any("stopped before the point finished" in w for w in doc["warnings"])
    assert len(files.requests.read_text().splitlines()) == point["completed"]


def test_bad_config_fails_with_the_field(tmp_path: Path) -> None:
    files = BenchFiles(tmp_path / "run")
    files.workdir.mkdir()
    files.config.write_text(json.dumps({"url": "http://x", "model": "m", "concurrency": [0]}))
    done = subprocess.run(bench_argv(files), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "concurrency[0]" in done.stderr
    state = ProgressReader(files.progress).poll()
    assert state.error is not None and "concurrency[0]" in state.error
    assert not files.result.exists()
