"""Integration: ``tunelab bench``'s output as issue 37 asked, through the real console script
against the real simulator: goodput printed beside the table, a trace replay's planned duration
and its clock, and a prompt file whose rows carry their own output lengths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunelab.bench.simulator.process import SimulatorProcess

TUNELAB = str(Path(sys.executable).with_name("tunelab"))


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulatorProcess]:
    with SimulatorProcess(["--ttft-ms", "20", "--itl-ms", "2"], tmp_path / "sim.log") as proc:
        yield proc


def bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUNELAB, "bench", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_goodput_is_printed_with_its_slo(sim: SimulatorProcess, tmp_path: Path) -> None:
    result = bench(
        "--url", sim.url, "--model", "tunelab-sim", "--concurrency", "2", "--requests", "6",
        "--input-len", "8", "--output-len", "4", "--slo-ttft-ms", "60000", "--slo-tpot-ms",
        "60000", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "c=2 goodput: " in result.stdout, result.stdout
    line = next(x for x in result.stdout.splitlines() if "goodput:" in x)
    assert "6 of 6 requests within TTFT <= 60000 ms, TPOT <= 60000 ms" in line, line


def test_vllm_goodput_flag_is_printed(sim: SimulatorProcess, tmp_path: Path) -> None:
    result = bench(
        "--base-url", sim.url, "--model", "tunelab-sim", "--dataset-name", "random",
        "--random-input-len", "8", "--random-output-len", "4", "--num-prompts", "4",
        "--max-concurrency", "2", "--goodput", "e2el:0.001", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "goodput: 0.00 req/s, 0 of 4 requests within E2E <= 0.001 ms" in result.stdout


def test_a_trace_replay_says_its_planned_duration_and_counts_down(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    """On a terminal (as a person runs it): a 4-row Mooncake trace over 2.5 s (``timestamp``
    in ms, issue 46) says so, with the unit, when it starts, and its bar is the schedule's
    clock."""
    import pty

    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": t, "input_length": 8, "output_length": 2, "hash_ids": [i]})
        + "\n"
        for i, t in enumerate([0, 1000, 2000, 2500])
    ))  # fmt: skip
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [TUNELAB, "bench", "--url", sim.url, "--model", "tunelab-sim", "--dataset", "trace",
         "--dataset-path", str(trace)],
        stdout=follower, stderr=follower, cwd=tmp_path, env={**os.environ, "COLUMNS": "160"},
    )  # fmt: skip
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        screen += data
    os.close(leader)
    text = screen.decode(errors="replace")
    assert proc.wait(30) == 0, text
    line = "point 1/1 trace: 4 requests over 0:02.5 as scheduled, timestamps in ms"
    assert line in text, text
    assert "planned 0:02.5" in text, text


def test_a_mooncake_trace_replays_at_its_recorded_times(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    """Issue 46: a trace in Mooncake's format (``timestamp`` in ms) through the real CLI is
    sent at its recorded times, each within 5 % of its schedule (the schedule each request
    record carries, not the wall clock), and says how it read them."""
    stamps = [0, 400, 1100, 2500]
    trace = tmp_path / "conversation_trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": t, "input_length": 16, "output_length": 2,
                    "hash_ids": [0, i + 1]}) + "\n"
        for i, t in enumerate(stamps)
    ))  # fmt: skip
    out = tmp_path / "run.json"
    result = bench(
        "--url",
        sim.url,
        "--model",
        "tunelab-sim",
        "--dataset",
        "trace",
        "--dataset-path",
        str(trace),
        "--trace-block-size",
        "8",
        "--out",
        str(out),
        cwd=tmp_path,
    )  # fmt: skip  (its 120 s timeout fails a replay read in seconds: 2500 s)
    assert result.returncode == 0, result.stderr
    said = "point 1/1 trace: 4 requests over 0:02.5 as scheduled, timestamps in ms"
    assert said in result.stderr  # piped too: said at its start
    doc = json.loads(out.read_text())
    assert doc["dataset"]["trace_seconds_per_unit"] == 0.001
    requests = [json.loads(x) for x in out.with_suffix(".requests.jsonl").read_text().splitlines()]
    measured = sorted((x for x in requests if not x["warmup"]), key=lambda x: x["index"])
    assert len(measured) == 4
    for record, stamp in zip(measured, stamps, strict=True):
        assert record["arrived_s"] == pytest.approx(stamp / 1000.0, rel=0.05, abs=0.005)


def test_a_trace_over_a_day_is_refused_before_it_starts(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": t, "input_length": 8, "output_length": 2}) + "\n"
        for t in (0, 90_000_000)
    ))  # fmt: skip
    args = ("--url", sim.url, "--model", "tunelab-sim", "--dataset", "trace",
            "--dataset-path", str(trace))  # fmt: skip
    result = bench(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "spans 25h00m (timestamps in ms), longer than a day" in result.stderr
    assert "--trace-long-schedule" in result.stderr
    asked = bench(*args, "--trace-long-schedule", "--duration", "1s", cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr


def test_a_prompt_files_own_output_lengths_need_no_output_len(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"prompt": "one two three", "output_len": 3}\n{"prompt": "four five", "output_len": 5}\n'
    )
    out = tmp_path / "run.json"
    result = bench(
        "--url", sim.url, "--model", "tunelab-sim", "--concurrency", "1", "--requests", "4",
        "--dataset", "file", "--dataset-path", str(prompts), "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [json.loads(x) for x in out.with_suffix(".requests.jsonl").read_text().splitlines()]
    assert sorted(x["max_tokens"] for x in lines) == [3, 3, 5, 5]
    unsized = tmp_path / "unsized.jsonl"
    unsized.write_text('{"prompt": "one two three"}\n{"prompt": "four", "output_len": 2}\n')
    refused = bench(
        "--url", sim.url, "--concurrency", "1", "--dataset", "file", "--dataset-path",
        str(unsized), cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "1 of 2 prompts have no output_len" in refused.stderr


def test_vllm_custom_output_len_minus_one_takes_each_rows_output_tokens(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    """vLLM's ``--custom-output-len -1``: each row's ``output_tokens`` (it was refused, naming
    --file-output-len, a flag the user never typed)."""
    prompts = tmp_path / "custom.jsonl"
    prompts.write_text(
        '{"prompt": "a b c", "output_tokens": 3}\n{"prompt": "d e", "output_tokens": 6}\n'
    )
    result = bench(
        "--base-url", sim.url, "--model", "tunelab-sim", "--dataset-name", "custom",
        "--dataset-path", str(prompts), "--custom-output-len", "-1", "--num-prompts", "4",
        "--max-concurrency", "1", "--save-result", "--result-dir", str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--file-output-len" not in result.stderr
    saved = [p for p in tmp_path.glob("*.json") if p.name != "custom.jsonl"]
    assert len(saved) == 1, saved
    assert json.loads(saved[0].read_text())["total_output_tokens"] == 2 * (3 + 6)
