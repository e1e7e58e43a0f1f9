"""``tunelab bench`` with a ``vllm bench serve`` line, through the real console script against
the simulator (issue 37.4): vLLM's default result-file name with ``-concurrency{N}``,
``num_prompts`` in it meaning what was asked (as in vLLM's file), and the dict form of
``--random-range-ratio``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunelab.bench.simulator.process import SimulatorProcess

TUNELAB = str(Path(sys.executable).with_name("tunelab"))


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulatorProcess]:
    with SimulatorProcess(["--ttft-ms", "5", "--itl-ms", "2"], tmp_path / "sim.log") as proc:
        yield proc


def bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUNELAB, "bench", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_the_result_file_has_vllms_name_and_num_prompts_is_what_was_asked(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    """prefix_repetition with 7 prompts over 3 prefixes sends 3 x (7 // 3) = 6, as vLLM does;
    vLLM's file says num_prompts 7 all the same (its args.num_prompts)."""
    done = bench(
        "--base-url", sim.url, "--model", "tunelab-sim", "--dataset-name", "prefix_repetition",
        "--prefix-repetition-prefix-len", "8", "--prefix-repetition-suffix-len", "4",
        "--prefix-repetition-num-prefixes", "3", "--prefix-repetition-output-len", "2",
        "--num-prompts", "7", "--max-concurrency", "2", "--save-result", "--result-dir", "r",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = [p.name for p in (tmp_path / "r").iterdir()]
    assert len(files) == 1, files
    assert re.fullmatch(r"openai-infqps-concurrency2-tunelab-sim-\d{8}-\d{6}\.json", files[0])
    saved = json.loads((tmp_path / "r" / files[0]).read_text())
    assert saved["num_prompts"] == 7
    assert saved["completed"] + saved["failed"] == 6 == saved["requests_planned"]


def test_an_open_loop_name_has_the_rate_and_no_concurrency(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    done = bench(
        "--base-url", sim.url, "--model", "tunelab-sim", "--random-input-len", "4",
        "--random-output-len", "2", "--num-prompts", "3", "--request-rate", "50",
        "--save-result", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = [p.name for p in tmp_path.glob("*.json")]
    assert len(names) == 1 and re.fullmatch(r"openai-50\.0qps-tunelab-sim-[\d-]+\.json", names[0])


def test_the_dict_range_ratio_sets_input_and_output_apart(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    done = bench(
        "--base-url", sim.url, "--model", "tunelab-sim", "--random-input-len", "40",
        "--random-output-len", "20", "--random-range-ratio", '{"input": 0.2, "output": 0.5}',
        "--num-prompts", "4", "--max-concurrency", "2", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)["config"]
    assert config["range_ratio"] == 0.2 and config["output_range_ratio"] == 0.5
    bad = bench("--base-url", sim.url, "--random-range-ratio", '{"input": 0.2}', cwd=tmp_path)
    assert bad.returncode == 2
    assert "--random-range-ratio: a JSON object needs exactly the keys input and output" in (
        bad.stderr
    )


TEMPLATE = "<|user|> {prompt} <|end|> <|assistant|>"


@pytest.fixture
def templated(tmp_path: Path) -> Iterator[SimulatorProcess]:
    args = ["--ttft-ms", "5", "--itl-ms", "2", "--chat-template", TEMPLATE]
    with SimulatorProcess(args, tmp_path / "templated.log") as proc:
        yield proc


def custom(url: str, tmp_path: Path, *more: str) -> dict[str, object]:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "one two three"}\n{"prompt": "four five"}\n')
    done = bench(
        "--base-url", url, "--model", "tunelab-sim", "--dataset-name", "custom",
        "--dataset-path", str(rows), "--num-prompts", "2", "--max-concurrency", "1",
        "--custom-output-len", "3", "--json", *more, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document: dict[str, object] = json.loads(done.stdout)
    return document


def test_custom_prompts_go_in_the_servers_chat_template_unless_skipped(
    templated: SimulatorProcess, sim: SimulatorProcess, tmp_path: Path
) -> None:
    """As vLLM's custom dataset: each prompt wrapped in the template (the server counts the
    template's words too), raw with --skip-chat-template, raw from a server without one."""
    wrapped = custom(templated.url, tmp_path)
    raw = custom(templated.url, tmp_path, "--skip-chat-template")
    plain = custom(sim.url, tmp_path)
    assert wrapped["dataset"]["chat_template"] is True  # type: ignore[index]
    assert raw["dataset"]["chat_template"] is None  # type: ignore[index]
    assert plain["dataset"]["chat_template"] is False  # type: ignore[index]
    sent = {name: doc["points"][0]["total_input_tokens"]  # type: ignore[index]
            for name, doc in (("wrapped", wrapped), ("raw", raw), ("plain", plain))}  # fmt: skip
    # the template adds 3 words around each of the 2 prompts
    assert sent["wrapped"] == sent["raw"] + 2 * 3, sent
    assert sent["plain"] == sent["raw"], sent
