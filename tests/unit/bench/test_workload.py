"""Workload: deterministic bodies, vLLM-style range ratio, arrival schedules."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.bench.workload import Workload, arrival_offsets


def cfg(**kw: object) -> BenchConfig:
    values: dict[str, object] = {
        "url": "http://h:1", "model": "m", "concurrency": (1,), "input_len": 100, "output_len": 50,
    }  # fmt: skip
    values.update(kw)
    return BenchConfig(**values).with_preset()  # type: ignore[arg-type]


def test_bodies_are_deterministic_and_complete() -> None:
    a = [Workload(cfg(), 0).request(i) for i in range(3)]
    b = Workload(cfg(), 0)
    assert [b.request(i) for i in (2, 0, 1)] == [a[2], a[0], a[1]]  # order-independent
    assert a[0].body != a[1].body
    assert Workload(cfg(), 1).request(0).body != a[0].body
    body = json.loads(a[0].body)
    assert len(body["prompt"].split()) == 100 and body["max_tokens"] == 50
    assert body["stream"] is True and body["ignore_eos"] is True and body["temperature"] == 0.0
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    chat = json.loads(Workload(cfg(api="chat"), 0).request(0).body)
    assert chat["messages"][0]["role"] == "user" and "prompt" not in chat


def test_range_ratio_spreads_lengths_both_ways() -> None:
    w = Workload(cfg(range_ratio=0.5), 1)
    lengths = [w.request(i).input_len for i in range(400)]
    assert min(lengths) >= 50 and max(lengths) <= 150
    assert min(lengths) < 60 and max(lengths) > 140
    assert statistics.mean(lengths) == pytest.approx(100, abs=5)


def gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_arrivals_rescaled_to_count_over_rate() -> None:
    offsets = list(arrival_offsets(10.0, 1.0, seed=3, count=200))
    assert len(offsets) == 200 and offsets[0] == 0.0
    assert 19.0 < offsets[-1] < 20.0  # the 200 gaps add up to exactly 200 / 10 s
    poisson = gaps(offsets)
    assert statistics.stdev(poisson) / statistics.mean(poisson) == pytest.approx(1.0, abs=0.3)
    bursty = gaps(list(arrival_offsets(10.0, 0.2, seed=3, count=400)))
    assert statistics.stdev(bursty) / statistics.mean(bursty) > 1.5  # gamma shape 0.2: cv 2.2


def test_duration_bounded_arrivals_stop_at_the_duration() -> None:
    offsets = list(arrival_offsets(50.0, 1.0, seed=1, duration=2.0))
    assert all(t < 2.0 for t in offsets)
    assert len(offsets) == pytest.approx(100, abs=35)
