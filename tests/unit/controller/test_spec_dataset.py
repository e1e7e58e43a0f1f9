"""Unit: ``benchmark.dataset:`` (and rate lists, max_concurrency, ramp) in an experiment spec,
carried to the agent as a DatasetSpec and checked by the same rules (issue 26)."""

from __future__ import annotations

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.spec.render import to_run_spec

BASE = """
name: sim
server:
  command: [python, -m, tunelab.bench.simulator]
  flags: {--port: "{port}"}
  ready: {model: sim-model}
benchmark:
"""


def run(bench: str) -> BenchConfig:
    experiment = expand_text(BASE + bench)[0]
    pb = to_run_spec(experiment.spec, "x-1-a1", gpus=[])
    return BenchConfig.from_builtin_pb(pb.benchmark.builtin, "http://127.0.0.1:1")


def test_a_shared_prefix_dataset_and_a_rate_list() -> None:
    c = run(
        "  rate: [1, 2.5]\n  max_concurrency: 8\n  requests: 20\n  input_len: 64\n"
        "  output_len: 16\n  dataset: {name: shared-prefix, prefix_len: 512, prefix_groups: 4,"
        " input_dist: lognormal, input_sigma: 0.5}\n"
    )
    assert c.dataset == "shared-prefix" and (c.prefix_len, c.prefix_groups) == (512, 4)
    assert c.input_dist == "lognormal" and c.input_sigma == 0.5
    assert c.rates == (1.0, 2.5) and c.max_concurrency == 8 and len(c.points()) == 2


def test_multi_turn_ramp_and_a_timed_trace() -> None:
    c = run(
        "  ramp: {strategy: linear, start_rate: 1, end_rate: 10}\n  requests: 30\n"
        "  input_len: 32\n  output_len: 8\n"
        "  dataset: {name: multi-turn, turns: 5, think_time: 2s}\n"
    )
    assert (c.turns, c.think_time_s, c.ramp, c.ramp_end_rate) == (5, 2.0, "linear", 10.0)
    sha = "ab" * 32
    c = run(
        f"  dataset: {{name: trace, path: traces/conv.jsonl, block_size: 512, sha256: {sha}}}\n"
    )
    assert c.timed_trace and c.dataset_path == "traces/conv.jsonl" and c.dataset_sha256 == sha
    assert c.trace_block_size == 512 and len(c.points()) == 1
    assert not c.trace_long_schedule
    c = run("  dataset: {name: trace, path: conv.jsonl, long_schedule: true}\n")  # issue 46
    assert c.trace_long_schedule and c.timed_trace


@pytest.mark.parametrize(
    ("bench", "message"),
    [
        ("  concurrency: [1]\n  requests: 2\n  dataset: {name: sonnet}\n", "benchmark.dataset"),
        ("  concurrency: [1]\n  requests: 2\n  dataset: {turnz: 3}\n", "benchmark.dataset.turnz"),
        ("  concurrency: [1]\n  requests: 2\n  dataset: {name: file}\n", "dataset_path"),
        ("  concurrency: [1]\n  requests: 2\n  dataset: {prefix_len: -1}\n", "prefix_len"),
        ("  rate: [1, x]\n  requests: 2\n", "benchmark.rate[1]"),
    ],
)
def test_bad_dataset_settings_name_their_field(bench: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[")):
        expand_text(BASE + bench)


def test_a_tokenizer_reaches_the_agent_as_given() -> None:
    """``benchmark.tokenizer`` (issue 35): the agent resolves it; a spec without one stores as
    it did (no key), so its experiments compare with those submitted before."""
    for name in ("model", "tokenizers/llama-3/tokenizer.json"):
        c = run(f"  concurrency: [1]\n  requests: 2\n  tokenizer: {name}\n")
        assert c.tokenizer == name
    plain = expand_text(BASE + "  concurrency: [1]\n  requests: 2\n")[0]
    assert "tokenizer" not in plain.spec["benchmark"]
    assert run("  concurrency: [1]\n  requests: 2\n").tokenizer == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/models/llama", "must be a relative path inside the agent's datasets folder"),
        ("../tok", "must be a relative path"),
        ('""', "must name a tokenizer.json"),
        ("[a]", "must be a string"),
        ("x" * 5000, "longer than 4096 bytes"),
    ],
)
def test_a_bad_tokenizer_names_its_field(value: str, message: str) -> None:
    with pytest.raises(SpecError, match=r"benchmark\.tokenizer") as info:
        expand_text(BASE + f"  concurrency: [1]\n  requests: 2\n  tokenizer: {value}\n")
    assert message in str(info.value)
