"""Unit: a Mooncake-format trace (issue 46) is scheduled at its recorded times.

Mooncake's traces, AIPerf's ``mooncake_trace`` (its loader divides ``timestamp`` by 1000) and
inference-perf's ``MooncakeTrace`` (``timestamp: int  # ms``) store ``timestamp`` in ms; vLLM's
``timed_trace`` (the drop-in ``vllm bench serve`` flags) reads it as seconds times
``--timed-trace-sec-multiplier``. A schedule longer than a day is refused unless asked for."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.bench.datasets import Dataset
from tunelab.bench.promptfiles import DatasetFileError
from tunelab.cli.bench_cmd import config_from_args, register

# the rows of a Mooncake trace as its files hold them: ms integers, block hash ids
MOONCAKE = [
    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": list(range(14))},
    {"timestamp": 400, "input_length": 7319, "output_length": 490, "hash_ids": [0, 1, 14, 15]},
    {"timestamp": 1100, "input_length": 7234, "output_length": 794, "hash_ids": [0, 16, 17]},
    {"timestamp": 2500, "input_length": 2287, "output_length": 316, "hash_ids": [18, 19, 20]},
]


def mooncake(tmp_path: Path, rows: list[dict[str, object]] = MOONCAKE) -> str:
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def config(path: str, **kw: object) -> BenchConfig:
    return BenchConfig(
        url="http://h:1",
        model="m",
        dataset="trace",
        dataset_path=path,
        **kw,  # type: ignore[arg-type]
    ).with_preset()


def test_mooncake_timestamps_are_milliseconds(tmp_path: Path) -> None:
    data = Dataset(config(mooncake(tmp_path)), None)
    scheduled = [data.arrival(i) for i in range(len(MOONCAKE))]
    recorded = [float(r["timestamp"]) / 1000.0 for r in MOONCAKE]  # type: ignore[arg-type]
    for at, want in zip(scheduled, recorded, strict=True):
        assert at == pytest.approx(want, rel=0.05, abs=1e-9)
    assert data.schedule_seconds() == pytest.approx(2.5)
    assert data.timestamp_unit == "timestamps in ms"
    assert data.describe()["trace_seconds_per_unit"] == 0.001


def test_a_multiplier_still_scales_and_says_its_unit(tmp_path: Path) -> None:
    seconds = Dataset(config(mooncake(tmp_path), trace_sec_multiplier=1.0), None)
    assert seconds.schedule_seconds() == 2500.0 and seconds.timestamp_unit == "timestamps in s"
    half = Dataset(config(mooncake(tmp_path), trace_sec_multiplier=0.0005), None)
    assert half.schedule_seconds() == pytest.approx(1.25)
    assert half.timestamp_unit == "timestamps x 0.0005 s"


def test_the_vllm_drop_in_keeps_vllms_seconds(tmp_path: Path) -> None:
    argv = ["--base-url", "http://h:1", "--model", "m", "--dataset-name", "timed_trace",
            "--dataset-path", mooncake(tmp_path)]  # fmt: skip
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    c = config_from_args(parser.parse_args(["bench", *argv]))
    assert c.trace_sec_multiplier == 1.0  # vLLM: timestamp x --timed-trace-sec-multiplier (1) s
    assert Dataset(c, None).timestamp_unit == "timestamps in s"


def test_a_schedule_over_a_day_is_refused_unless_asked_for(tmp_path: Path) -> None:
    rows = [dict(MOONCAKE[0]), {**MOONCAKE[1], "timestamp": 90_000_000}]  # 25 h in ms
    path = mooncake(tmp_path, rows)
    with pytest.raises(DatasetFileError, match="longer than a day") as caught:
        Dataset(config(path), None)
    assert "--trace-long-schedule" in str(caught.value)
    assert "timestamps in ms" in str(caught.value)
    allowed = Dataset(config(path, trace_long_schedule=True), None)
    assert allowed.schedule_seconds() == 90_000.0
    # bounded some other way: no schedule to refuse
    Dataset(config(path, duration_seconds=60.0), None)
    Dataset(config(path, requests=1), None)
    Dataset(config(path, trace_timed=False, concurrency=(1,), requests=2), None)
