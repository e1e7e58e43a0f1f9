"""Integration: ``tunelab bench`` and its tokenizer against the simulator (issue 35 item 6). A
pasted `vllm bench serve` line names the model's hub id in --tokenizer: it runs as written where
the local Hugging Face cache holds that tokenizer, and is refused (exit 2) where it does not,
without a download; the summary prints the server's own mean prompt tokens, and without a
tokenizer says the lengths are approximate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tiny_tokenizer import write_tokenizer
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.cli.main import main


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorProcess]:
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    with SimulatorProcess(["--ttft-ms", "2", "--itl-ms", "1"], log) as proc:
        yield proc


def vllm_line(url: str, tokenizer: str) -> list[str]:
    line = ["bench", "--backend", "openai", "--base-url", url, "--model", "tunelab-sim"]
    line += ["--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", "32"]
    return [*line, "--random-output-len", "4", "--num-prompts", "6", "--max-concurrency", "2"]


def test_a_hub_id_runs_from_the_local_cache(
    sim: SimulatorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc"
    write_tokenizer(snapshot, bos=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    out = tmp_path / "r.json"
    assert main([*vllm_line(sim.url, "org/tiny"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "prompt tokens (server's count): mean 32.0 per request\n" in text
    assert "approximate" not in text
    document = json.loads(out.read_text())
    assert document["config"]["tokenizer"] == str(snapshot / "tokenizer.json")
    point = document["points"][0]
    assert point["min_input_tokens"] == point["max_input_tokens"] == 32


def test_a_hub_id_not_in_the_cache_is_refused_without_a_download(
    sim: SimulatorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    assert main(vllm_line(sim.url, "org/missing")) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "nothing is downloaded" in err


def test_without_a_tokenizer_the_summary_says_lengths_are_approximate(
    sim: SimulatorProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--url", sim.url, "--model", "m", "--concurrency", "2", "--requests", "4"]
    assert main([*argv, "--input-len", "16", "--output-len", "4"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "prompt tokens (server's count): mean 16.0 per request" in text
    assert "warning: lengths are approximate" in text
    assert text.count("approximate") == 1, text  # once, not three times (issue 46.5)
