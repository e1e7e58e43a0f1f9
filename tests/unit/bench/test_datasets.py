# ruff: noqa: E501 - the malformed-file cases read best one per line
"""Datasets (issue 26): lengths exact with a tokenizer, shared-prefix and trace block structure,
multi-turn conversations, prompt files and every malformed-file case, ramps."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from tests.unit.bench.test_parity import tokenizer_dir  # noqa: F401 - the fixture
from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.bench.datasets import Dataset, draw_length
from tunelab.bench.promptfiles import DatasetFileError, load
from tunelab.bench.tokens import TokenPrompts
from tunelab.bench.workload import Workload, ramp_offsets


def cfg(**kw: object) -> BenchConfig:
    values: dict[str, object] = {
        "url": "http://h:1", "model": "m", "concurrency": (1,), "input_len": 40, "output_len": 8,
    }  # fmt: skip
    values.update(kw)
    return BenchConfig(**values).with_preset()  # type: ignore[arg-type]


def test_lognormal_lengths_have_the_mean_and_a_long_tail() -> None:
    rng = random.Random(1)
    draws = [draw_length(100, "lognormal", 0.0, 0.8, rng) for _ in range(4000)]
    assert statistics.mean(draws) == pytest.approx(100, rel=0.08)
    assert max(draws) > 400 and min(draws) >= 1
    assert statistics.median(draws) < 90  # skewed: median below the mean
    w = Workload(cfg(input_dist="lognormal", input_sigma=0.5, output_range_ratio=0.5), 0)
    outs = [w.request(i).output_len for i in range(200)]
    assert min(outs) >= 4 and max(outs) <= 12 and len(set(outs)) > 3


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"prefix_len": 25},
        {"dataset": "shared-prefix", "prefix_len": 30, "prefix_groups": 3},
        {"input_dist": "lognormal", "input_sigma": 0.6},
    ],
)
def test_synthetic_lengths_are_exact_with_a_tokenizer(
    tokenizer_dir: Path,  # noqa: F811
    extra: dict[str, object],
) -> None:
    config = cfg(tokenizer=str(tokenizer_dir), range_ratio=0.3, **extra)
    tokens = TokenPrompts(config.tokenizer)
    data = Dataset(config, tokens)
    assert data.lengths_exact and data.describe()["lengths"] == "exact (tokenizer)"
    for i in range(12):
        p = data.prompt(0, i)
        assert tokens.count(p.text) == p.input_len


def test_multi_turn_and_trace_lengths_are_exact_with_a_tokenizer(
    tokenizer_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    tokens = TokenPrompts(str(tokenizer_dir))
    conv = Dataset(cfg(dataset="multi-turn", turns=3, prefix_len=9, tokenizer="x"), tokens)
    turns = conv.conversation(0, 5)
    assert len(turns) == 3
    assert [tokens.count(t.text) for t in turns] == [t.input_len for t in turns]
    assert turns[0].input_len == 40 + 9
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 70, "output_length": 3, "hash_ids": [1, 2, 3]},
        {"timestamp": 5, "input_length": 45, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 9, "input_length": 90, "output_length": 3, "hash_ids": [7]},
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    data = Dataset(cfg(dataset="trace", dataset_path=str(trace), trace_block_size=32), tokens)
    for i, row in enumerate(rows):
        assert tokens.count(data.prompt(0, i).text) == row["input_length"]


def test_approximate_lengths_are_said_so() -> None:
    data = Dataset(cfg(), None)
    assert not data.lengths_exact and data.describe()["lengths"].startswith("approximate")


def test_shared_prefix_groups_interleave_and_share_exactly_their_prefix() -> None:
    data = Dataset(cfg(dataset="shared-prefix", prefix_len=20, prefix_groups=4), None)
    prompts = [data.prompt(0, i) for i in range(12)]
    assert [p.group for p in prompts] == [0, 1, 2, 3] * 3
    for p in prompts:
        words = p.text.split()
        assert len(words) == 20 + 40 == p.input_len
        assert words[:20] == data.prefix(p.group or 0).split()
    heads = {tuple(p.text.split()[:20]) for p in prompts}
    assert len(heads) == 4  # four distinct prefixes
    assert len({p.text for p in prompts}) == 12  # every suffix unique
    assert data.prompt(1, 0).text.split()[:20] == prompts[0].text.split()[:20]  # across points


def test_random_prefix_is_one_prefix_for_all() -> None:
    data = Dataset(cfg(prefix_len=10), None)
    a, b = data.prompt(0, 0), data.prompt(0, 1)
    assert a.text.split()[:10] == b.text.split()[:10] and a.input_len == 50
    assert a.group == 0


def trace_file(tmp_path: Path, rows: list[dict[str, object]]) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_trace_blocks_repeat_where_hash_ids_repeat(tmp_path: Path) -> None:
    path = trace_file(
        tmp_path,
        [
            {"timestamp_ms": 1000, "input_length": 25, "output_length": 4, "hash_ids": [1, 2, 3]},
            {"timestamp_ms": 1500, "input_length": 20, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp_ms": 4000, "input_length": 12, "output_length": 6, "hash_ids": [9, 2]},
        ],
    )
    data = Dataset(cfg(dataset="trace", dataset_path=path, trace_block_size=10), None)
    a, b, c = (data.prompt(0, i).text.split() for i in range(3))
    assert (len(a), len(b), len(c)) == (25, 20, 12)
    assert a[:20] == b[:20]  # blocks 1 and 2 shared
    assert a[20:] != b[:5]
    assert c[:10] != a[:10] and c[10:] != a[10:12]  # block 9 differs; a partial block 2 is its own
    assert [data.arrival(i) for i in range(3)] == [0.0, 0.5, 3.0]  # ms field → seconds
    assert [data.prompt(0, i).output_len for i in range(3)] == [4, 5, 6]
    assert data.prompt(0, 0).group == 1
    fast = Dataset(
        cfg(dataset="trace", dataset_path=path, trace_block_size=10, trace_sec_multiplier=0.0005),
        None,
    )
    assert fast.arrival(2) == pytest.approx(1.5)
    assert fast.describe()["sha256"] == data.describe()["sha256"] != ""


def test_a_timed_trace_is_one_point_without_a_rate(tmp_path: Path) -> None:
    path = trace_file(tmp_path, [{"timestamp": 0, "input_length": 3, "output_length": 2}])
    config = BenchConfig(url="http://h:1", dataset="trace", dataset_path=path).with_preset()
    assert config.timed_trace and len(config.points()) == 1
    assert config.points()[0].requests == 0  # every row
    with pytest.raises(BenchConfigError, match="dataset_path"):
        cfg(dataset="trace")
    with pytest.raises(BenchConfigError, match="dataset_path"):
        cfg(dataset_path=path)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_prompt_files_of_each_format(tmp_path: Path) -> None:
    sharegpt = json.dumps([
        {"conversations": [{"from": "human", "value": "hello there"},
                           {"from": "gpt", "value": "one two three four five"}]},
        {"conversations": [{"from": "human", "value": "x"}]},
    ])  # fmt: skip
    loaded = load(write(tmp_path, "s.json", sharegpt))
    assert loaded.format == "sharegpt" and len(loaded.items) == 1
    assert loaded.problems == ["entry 2: fewer than two turns"]
    data = Dataset(cfg(dataset="file", dataset_path=str(tmp_path / "s.json")), None)
    p = data.prompt(0, 0)
    assert p.text == "hello there" and p.output_len == 5  # from the recorded reply
    fixed = Dataset(
        cfg(dataset="file", dataset_path=str(tmp_path / "s.json"), file_output_len=7), None
    )
    assert fixed.prompt(0, 3).output_len == 7
    chat = '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 9}\n'
    loaded = load(write(tmp_path, "c.jsonl", chat))
    assert loaded.format == "chat" and loaded.items[0].messages == (
        ("system", "be brief"), ("user", "hi"),
    )  # fmt: skip
    body = json.loads(
        Workload(cfg(dataset="file", dataset_path=str(tmp_path / "c.jsonl"), api="chat"), 0)
        .request(0)
        .body
    )
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["max_tokens"] == 9
    plain = '{"prompt": "a b c", "output_len": 3}\n{"prompt": "d e"}\n'
    data = Dataset(cfg(dataset="file", dataset_path=write(tmp_path, "p.jsonl", plain)), None)
    got = sorted((data.prompt(0, i).text, data.prompt(0, i).output_len) for i in range(2))
    assert got == [("a b c", 3), ("d e", 8)]  # no output_len: the run's
    assert {data.prompt(0, i).text for i in range(10)} == {"a b c", "d e"}  # cycled


@pytest.mark.parametrize(
    ("fmt", "text", "problem"),
    [
        ("jsonl", '{"prompt": "ok"}\nnot json\n', "line 2: not JSON"),
        ("jsonl", '{"prompt": "ok"}\n[1, 2]\n', "line 2: not a JSON object"),
        ("jsonl", '{"prompt": "ok"}\n{"text": "x"}\n', 'line 2: no "prompt" string'),
        ("jsonl", '{"prompt": "ok"}\n{"prompt": "  "}\n', 'line 2: no "prompt" string'),
        ("jsonl", '{"prompt": "ok"}\n\n{"prompt": "x", "output_len": 0}\n', "line 3: output_len"),
        ("jsonl", '{"prompt": "ok"}\n{"prompt": "x", "output_len": "5"}\n', "line 2: output_len"),
        ("chat", '{"messages": [{"role": "user", "content": "a"}]}\n{"messages": []}\n',
         'line 2: no "messages" list'),
        ("chat", '{"messages": [{"role": "user", "content": "a"}]}\n{"messages": ["hi"]}\n',
         "line 2: messages[0] is not an object"),
        ("chat", '{"messages": [{"role": "user", "content": "a"}]}\n{"messages": [{"role": "user"}]}\n',
         'line 2: messages[0] needs "role" and "content"'),
        ("sharegpt", '{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}\n{"conversations": 3}\n',
         'line 2: no "conversations" list'),
        ("sharegpt", '{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}\n{"conversations": [{"value": "a"}, {"from": "gpt", "value": "b"}]}\n',
         'line 2: conversations[0] needs "from" and "value"'),
        ("trace", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": -1, "input_length": 3, "output_length": 2}\n',
         'line 2: "timestamp" must be a number in 0..1e+13'),
        # issue 45.2: 1e400 (JSON's inf) was "a bug", 1e308 slept for ever; both refused, named
        ("trace", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": 1e400, "input_length": 3, "output_length": 2}\n',
         'line 2: "timestamp" must be a number in 0..1e+13'),
        ("trace", '{"timestamp_ms": 0, "input_length": 3, "output_length": 2}\n{"timestamp_ms": 1e308, "input_length": 3, "output_length": 2}\n',
         'line 2: "timestamp_ms" must be a number in 0..1e+13'),
        ("trace", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": NaN, "input_length": 3, "output_length": 2}\n',
         'line 2: "timestamp" must be a number in 0..1e+13'),
        ("trace", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": 1, "input_length": 0, "output_length": 2}\n',
         'line 2: "input_length" must be an integer from 1 to 10000000'),
        ("trace", '{"timestamp": 0, "input_length": 3, "output_length": 2}\n{"timestamp": 1, "input_length": 3, "output_length": 2, "hash_ids": ["a"]}\n',
         'line 2: "hash_ids" must be a list of integers'),
    ],
)  # fmt: skip
def test_each_malformed_line_is_reported_by_number(
    tmp_path: Path, fmt: str, text: str, problem: str
) -> None:
    loaded = load(write(tmp_path, "f.jsonl", text), fmt)
    assert len(loaded.items) + len(loaded.rows) == 1
    assert len(loaded.problems) == 1 and loaded.problems[0].startswith(problem)
    dataset = "trace" if fmt == "trace" else "file"
    data = Dataset(cfg(dataset=dataset, dataset_path=str(tmp_path / "f.jsonl")), None)
    assert data.describe()["malformed"] == 1 and problem in data.warnings()[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no usable"),
        ("not json\n{]\n", "line 1: not JSON; line 2: not JSON"),
        ('{"prompt": 3}\n', 'line 1: no "prompt" string'),
        ("[1, 2", "not JSON"),
        ('{"a": 1}', "not a JSON array"),
    ],
)
def test_a_file_with_no_usable_line_is_refused(tmp_path: Path, text: str, message: str) -> None:
    fmt = "sharegpt" if text.startswith(("[", '{"a"')) else "auto"
    path = write(tmp_path, "bad.json", text)
    if text.startswith('{"a"'):
        path = write(tmp_path, "bad.json", "[" * 0 + '{"a": 1}')
        with pytest.raises(DatasetFileError, match="no usable"):
            load(path, "sharegpt")
        return
    with pytest.raises(DatasetFileError, match=message.replace("[", r"\[")):
        load(path, fmt)


def test_missing_and_non_utf8_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetFileError, match="cannot read"):
        load(str(tmp_path / "nope.jsonl"))
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DatasetFileError, match="not UTF-8"):
        load(str(tmp_path / "bin"))


def test_ramp_rate_rises_from_start_to_end() -> None:
    offsets = list(ramp_offsets("linear", 2.0, 20.0, 1.0, seed=1, count=400))
    assert len(offsets) == 400 and offsets[0] == 0.0
    first, last = offsets[100] - offsets[0], offsets[-1] - offsets[-101]
    assert first > 3 * last  # the early requests are spread much wider than the late ones
    expo = list(ramp_offsets("exponential", 1.0, 50.0, 1.0, seed=1, duration=10.0))
    assert all(t < 10.0 for t in expo) and len(expo) > 50
    config = cfg(concurrency=(), ramp="linear", ramp_start_rate=1, ramp_end_rate=5)
    assert len(config.points()) == 1 and config.points()[0].requests > 0
    with pytest.raises(BenchConfigError, match="ramp"):
        cfg(concurrency=(), ramp="linear", ramp_start_rate=1, ramp_end_rate=5, request_rate=2)


def test_rate_lists_are_points() -> None:
    config = cfg(concurrency=(), rates=(1.0, 2.5), requests=5, max_concurrency=3)
    points = config.points()
    assert [p.request_rate for p in points] == [1.0, 2.5]
    assert all(p.max_concurrency == 3 and p.requests == 5 for p in points)
    assert BenchConfig.from_dict(config.to_dict()) == config


def test_points_are_labelled_by_what_they_are() -> None:
    from tunelab.bench.console import point_label

    assert point_label(16, "inf") == "c=16" and point_label(0, 2.0) == "rate=2.0/s"
    ramp = {"ramp": {"strategy": "linear", "start_rate": 1.0, "end_rate": 8.0}}
    assert point_label(0, "inf", ramp) == "ramp 1->8/s"
    assert point_label(0, "inf", {"dataset": "trace", "ramp": None}) == "trace"
