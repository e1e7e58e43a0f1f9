"""``tunelab bench`` with ``vllm bench serve``'s flags: vLLM's meanings and defaults, and every
unsupported vLLM flag refused by name (issue 26). No server: the parse and the mapping only."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.cli.bench_cmd import config_from_args, register
from tunelab.cli.bench_vllm import UNSUPPORTED
from tunelab.cli.common import CliError
from tunelab.cli.main import main


def parse(*argv: str) -> BenchConfig:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return config_from_args(parser.parse_args(["bench", *argv]))


def test_a_plain_vllm_line_gets_vllms_defaults() -> None:
    c = parse("--model", "m", "--max-concurrency", "16")
    assert c.url == "http://127.0.0.1:8000" and c.api == "completions"
    assert c.concurrency == (16,) and c.requests == 1000
    assert (c.input_len, c.output_len, c.range_ratio) == (1024, 128, 0.0)
    assert c.ignore_eos is False and c.send_temperature is False and c.dataset == "random"


def test_random_with_range_prefix_rate_and_goodput() -> None:
    c = parse(
        "--base-url", "http://h:9", "--backend", "openai-chat", "--dataset-name", "random",
        "--random-input-len", "200", "--random-output-len", "20", "--random-range-ratio", "0.5",
        "--random-prefix-len", "64", "--num-prompts", "50", "--request-rate", "4",
        "--burstiness", "0.5", "--max-concurrency", "8", "--ignore-eos", "--seed", "7",
        "--temperature", "0.3", "--goodput", "ttft:200", "e2el:900",
        "--metric-percentiles", "50,90", "--percentile-metrics", "ttft,e2el",
    )  # fmt: skip
    assert c.url == "http://h:9" and c.api == "chat"
    assert (c.input_len, c.output_len, c.range_ratio, c.prefix_len) == (200, 20, 0.5, 64)
    assert c.rates == (4.0,) and c.max_concurrency == 8 and c.burstiness == 0.5
    assert c.requests == 50 and c.ignore_eos and c.seed == 7
    assert c.send_temperature and c.temperature == 0.3
    assert (c.slo_ttft_ms, c.slo_e2el_ms) == (200.0, 900.0)
    assert c.percentiles == (50.0, 90.0) and c.percentile_metrics == ("ttft", "e2el")


def test_prefix_repetition_is_shared_prefix() -> None:
    c = parse(
        "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "100",
        "--prefix-repetition-suffix-len", "30", "--prefix-repetition-num-prefixes", "4",
        "--prefix-repetition-output-len", "9", "--num-prompts", "10",
    )  # fmt: skip
    assert c.dataset == "shared-prefix" and (c.prefix_len, c.input_len) == (100, 30)
    assert c.prefix_groups == 4 and c.output_len == 9
    assert c.requests == 8  # vLLM: 4 prefixes x (10 // 4) prompts
    assert c.concurrency == (8,)  # rate inf, no cap: all at once


def test_file_and_trace_datasets(tmp_path: object) -> None:
    c = parse("--dataset-name", "sharegpt", "--dataset-path", "/d/s.json",
              "--sharegpt-output-len", "64", "--max-concurrency", "2")  # fmt: skip
    assert (c.dataset, c.file_format, c.file_output_len) == ("file", "sharegpt", 64)
    c = parse("--dataset-name", "custom", "--dataset-path", "/d/c.jsonl")
    assert (c.file_format, c.file_output_len) == ("jsonl", 256)  # vLLM's --custom-output-len
    c = parse("--dataset-name", "timed_trace", "--dataset-path", "/d/t.jsonl",
              "--timed-trace-sec-multiplier", "0.001", "--max-concurrency", "32")  # fmt: skip
    assert c.timed_trace and c.trace_block_size == 16 and c.trace_sec_multiplier == 0.001
    assert c.max_concurrency == 32 and len(c.points()) == 1
    c = parse("--dataset-name", "timed_trace", "--dataset-path", "/d/t.jsonl",
              "--no-self-timed", "--request-rate", "3")  # fmt: skip
    assert not c.timed_trace and c.rates == (3.0,)


def test_ramp_up() -> None:
    c = parse("--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "1",
              "--ramp-up-end-rps", "20", "--num-prompts", "40")  # fmt: skip
    assert (c.ramp, c.ramp_start_rate, c.ramp_end_rate, c.requests) == (
        "exponential", 1.0, 20.0, 40,
    )  # fmt: skip
    with pytest.raises(CliError, match="--request-rate"):
        parse("--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
              "--ramp-up-end-rps", "2", "--request-rate", "3")  # fmt: skip


def test_native_rate_list_and_datasets() -> None:
    c = parse("--url", "http://h:1", "--model", "m", "--rate", "1,2.5", "--requests", "5",
              "--input-len", "8", "--output-len", "4", "--max-concurrency", "3",
              "--dataset", "multi-turn", "--turns", "3", "--think-time", "500ms")  # fmt: skip
    assert c.rates == (1.0, 2.5) and c.max_concurrency == 3
    assert (c.dataset, c.turns, c.think_time_s) == ("multi-turn", 3, 0.5)
    assert not math.isinf(c.points()[1].request_rate)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset-name", "sonnet"], "--dataset-name: 'sonnet' is not supported"),
        (["--dataset-name", "sharegpt"], "--dataset-path: sharegpt needs a file"),
        (["--dataset-name", "random", "--dataset-path", "x"], "--dataset-path"),
        (["--endpoint", "/v1/embeddings"], "--endpoint"),
        (["--goodput", "itl:3"], "--goodput"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--num-prompts", "5", "--concurrency", "2"], "--concurrency: not with vllm"),
        (["--metric-percentiles", "x"], "--metric-percentiles"),
        (["--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
    ],
)
def test_bad_vllm_values_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message) as info:
        parse(*argv)
    assert info.value.code == 2


@pytest.mark.parametrize("flag", UNSUPPORTED)
def test_every_unsupported_vllm_flag_is_refused_by_name(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--model", "m", flag, "1"]) == 2
    err = capsys.readouterr().err
    assert flag in err and "does not support" in err


@pytest.mark.parametrize(
    "flag",
    [
        "--enable-multimodal-chat",
        "--speed-bench-dataset-subset",
        "--speed-bench-output-len",
        "--speed-bench-category",
    ],
)
def test_vllm_032s_multimodal_chat_and_speed_bench_flags_are_refused_by_name(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """In vLLM 0.32's parser (benchmarks/datasets/datasets.py) and once in neither of our lists:
    argparse refused them as unknown; now they are named as vLLM flags tunelab does not take."""
    assert flag in UNSUPPORTED
    assert main(["bench", "--model", "m", flag, "x"]) == 2
    err = capsys.readouterr().err
    assert flag in err and "does not support" in err


def test_the_docs_name_every_refused_flag() -> None:
    """docs/workloads.md's "Refused by name" list: each flag, or its family (`--hf-*`)."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "workloads.md").read_text()
    listed = text[text.index("Refused by name with exit 2") : text.index("Flags are never")]
    named = set(re.findall(r"`(--[a-z0-9-]+)`", listed))
    families = re.findall(r"`(--[a-z0-9-]+-)\*`", listed)
    missing = [f for f in UNSUPPORTED if f not in named and not f.startswith(tuple(families))]
    assert missing == []
    assert named <= set(UNSUPPORTED)  # and the docs name none that is taken


def test_no_vllm_flag_is_taken_as_an_abbreviation(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:  # argparse's own usage error: exit 2
        main(["bench", "--url", "http://h:1", "--random-prefix", "4"])
    assert info.value.code == 2
    assert "--random-prefix" in capsys.readouterr().err
