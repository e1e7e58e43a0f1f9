"""``tunelab bench`` end to end for issue 26: a vllm bench serve line with --save-result,
file datasets refused before anything starts, and SIGTERM or a SIGINT sent to it alone handled
like Ctrl-C (issue 36)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_cli_first_hour import SIGINT_AT_DEFAULT
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.cli.main import main


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulatorProcess]:
    with SimulatorProcess(["--ttft-ms", "20", "--itl-ms", "20"], tmp_path / "sim.log") as proc:
        yield proc


def test_a_vllm_bench_serve_line_runs_and_saves_vllms_result(
    sim: SimulatorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "bench", "--base-url", sim.url, "--model", "tunelab-sim", "--dataset-name",
        "prefix_repetition", "--prefix-repetition-prefix-len", "16",
        "--prefix-repetition-suffix-len", "8", "--prefix-repetition-num-prefixes", "2",
        "--prefix-repetition-output-len", "3", "--num-prompts", "6", "--max-concurrency", "3",
        "--ignore-eos", "--save-result", "--result-dir", str(tmp_path / "r"),
        "--result-filename", "out.json", "--metric-percentiles", "50,99", "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((tmp_path / "r" / "out.json").read_text())
    assert saved["completed"] == 6 and saved["max_concurrency"] == 3
    assert saved["total_output_tokens"] == 18 and "p50_ttft_ms" in saved
    assert sorted(saved["by_prefix_group"]) == ["0", "1"]
    assert saved["dataset"]["name"] == "shared-prefix" == printed["dataset"]["name"]
    assert printed["config"]["ignore_eos"] is True


def test_an_unusable_file_is_refused_with_its_line_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": 1}\nnope\n')
    argv = ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1"]
    argv += ["--dataset", "file", "--dataset-path", str(bad), "--output-len", "4"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no usable" in err and "line 1:" in err and "line 2: not JSON" in err
    good = tmp_path / "g.jsonl"
    good.write_text('{"prompt": "a b"}\n')
    assert main([*argv[:-4], "--dataset", "file", "--dataset-path", str(good),
                 "--output-len", "4", "--dataset-sha256", "0" * 64]) == 2  # fmt: skip
    assert "has sha256" in capsys.readouterr().err


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_bench_alone_keeps_finished_requests_writes_out_and_stops_the_child(
    sim: SimulatorProcess, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """SIGTERM, and SIGINT as ``timeout -s INT`` or a supervisor sends it (to ``tunelab bench``
    alone, not a terminal's whole group): before issue 36, SIGINT was taken as a Ctrl-C the
    child had also had, and the child ran on through all its 100,000 requests."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "res.json"
    # SIGINT at its default, as a terminal or `timeout` leaves it (test_cli_first_hour says why)
    argv = [*SIGINT_AT_DEFAULT, sys.executable, "-m", "tunelab.cli", "bench", "--url", sim.url]
    argv += ["--model", "m"]
    argv += ["--concurrency", "2", "--requests", "100000", "--input-len", "4"]
    argv += ["--output-len", "10", "--out", str(out), "--json"]
    log = (tmp_path / "cli.log").open("wb")
    cli = subprocess.Popen(argv, stdout=log, stderr=log, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 30
        child = 0
        while time.monotonic() < deadline:  # wait until some requests have finished
            kids = [k for k in _children(cli.pid) if "tunelab.bench" in _cmdline(k)]
            progress = list(tmp.glob("tunelab-bench-*/bench-progress.jsonl"))
            lines = progress[0].read_text().splitlines() if progress else []
            if kids and any(
                '"requests_done":' in x and '"requests_done":0,' not in x for x in lines
            ):
                child = kids[0]
                break
            time.sleep(0.1)
        assert child, (tmp_path / "cli.log").read_text()
        cli.send_signal(sig)  # to tunelab bench alone, not its process group
        assert cli.wait(30) == code
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        log.close()
    document = json.loads(out.read_text())
    assert document["status"] == f"stopped by {sig.name}"
    point = document["points"][0]
    assert point["interrupted"] and point["completed"] > 0
    assert out.with_suffix(".requests.jsonl").exists()
    assert "tunelab.bench" not in _cmdline(child)  # the generator child is gone
    assert list(tmp.iterdir()) == []  # no temp dir left behind
