"""``tunelab bench`` and ``tunelab sim-server`` end to end: real simulator, real bench process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.cli.main import main


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulatorProcess]:
    with SimulatorProcess(["--ttft-ms", "30", "--itl-ms", "5"], tmp_path / "sim.log") as proc:
        yield proc


def test_bench_json_and_out_files(
    sim: SimulatorProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "res" / "run.json"
    argv = ["bench", "--url", sim.url, "--model", "tunelab-sim", "--concurrency", "1,4"]
    argv += ["--requests", "8", "--input-len", "16", "--output-len", "10", "--warmup", "2"]
    code = main([*argv, "--json", "--out", str(out)])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "completed"
    assert [p["max_concurrency"] for p in printed["points"]] == [1, 4]
    assert all(p["completed"] == 8 and p["total_output_tokens"] == 80 for p in printed["points"])
    assert json.loads(out.read_text()) == printed
    lines = [json.loads(x) for x in out.with_suffix(".requests.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * (8 + 2)
    assert sum(1 for x in lines if x["warmup"]) == 4
    measured = [x for x in lines if not x["warmup"]]
    assert all(len(x["chunk_ms"]) == 10 and x["chunk_tokens"] == [1] * 10 for x in measured)


def test_bench_table_and_decode_preset(
    sim: SimulatorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--url", sim.url, "--model", "m", "--preset", "decode", "--output-len", "20"]
    assert main([*argv, "--requests", "1"]) == 0
    text = capsys.readouterr().out
    assert "TPOT" in text and "mean/p99" in text and "/" in text.split("c=1", 1)[1]
    assert "c=1 decode: TPOT" in text and "over 19 tokens" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--concurrency", "1,x"], "--concurrency"),
        (["--concurrency", "4,0"], "--concurrency"),
        (["--rate", "-2"], "--rate"),
        (["--concurrency", "2", "--duration", "soon"], "--duration"),
    ],
)
def test_bench_usage_errors_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--input-len", "4"]
    assert main([*argv, "--output-len", "4", *extra]) == 2
    assert message in capsys.readouterr().err


def test_bench_unreachable_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    argv = ["bench", "--url", url, "--model", "m", "--concurrency", "1"]
    assert main([*argv, "--input-len", "4", "--output-len", "4"]) == 3
    assert "cannot reach" in capsys.readouterr().err


def test_bench_all_failed_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with SimulatorProcess(["--fault", "500"], tmp_path / "sim.log") as proc:
        argv = ["bench", "--url", proc.url, "--model", "m", "--concurrency", "2", "--json"]
        assert main([*argv, "--requests", "4", "--input-len", "4", "--output-len", "4"]) == 1
    point = json.loads(capsys.readouterr().out)["points"][0]
    assert point["errors_by_kind"] == {"http_500": 4} and point["completed"] == 0


def test_sim_server_command(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "tunelab.cli", "sim-server", "--port", str(port)]
    log = (tmp_path / "sim.log").open("wb")
    proc = subprocess.Popen([*argv, "--startup-seconds", "0.3"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        log.close()
    assert (
        b"Loading safetensors checkpoint shards: 100% Completed"
        in (tmp_path / "sim.log").read_bytes()
    )
