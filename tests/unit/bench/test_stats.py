"""Aggregation over hand-built records: definitions, percentiles, goodput, peaks."""

from __future__ import annotations

import pytest

from tunelab.bench.stats import percentile, summarize, token_gaps, tpot
from tunelab.bench.stream import RequestRecord


def record(times: list[float], tokens: list[int | None], start: float = 0.0) -> RequestRecord:
    rec = RequestRecord(0, False, 10, 100, scheduled=start, start=start)
    rec.chunk_times = [start + t for t in times]
    rec.chunk_tokens = tokens
    rec.output_tokens = sum(t or 0 for t in tokens) if None not in tokens else 8
    rec.end = rec.chunk_times[-1]
    rec.token_source = "usage_continuous"
    return rec


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(7.6)
    assert percentile(values, 99) == pytest.approx(9.76)
    assert percentile([], 99) == 0.0


def test_tpot_and_per_token_itl_with_multi_token_chunks() -> None:
    rec = record([0.3, 0.4, 0.5], [4, 4, 2])
    assert tpot(rec) == pytest.approx(0.2 / 9)
    assert token_gaps(rec) == pytest.approx([0.025] * 4 + [0.05] * 2)


def test_unknown_chunk_tokens_use_the_mean_per_chunk() -> None:
    rec = record([0.1, 0.3], [None, None])  # 8 tokens over 2 chunks
    assert token_gaps(rec) == pytest.approx([0.05])


def test_summary_fields_errors_and_goodput() -> None:
    fast = record([0.1, 0.2, 0.3], [1, 1, 1])
    slow = record([0.5, 0.6, 0.7], [1, 1, 1], start=0.1)
    failed = RequestRecord(2, False, 10, 100, scheduled=0.0, start=0.0, end=0.2)
    failed.error_kind = "http_429"
    s = summarize([fast, slow, failed], duration=1.0, slo_ttft_ms=200.0, slo_tpot_ms=0.0)
    assert (s["completed"], s["failed"]) == (2, 1)
    assert s["errors_by_kind"] == {"http_429": 1}
    assert s["good_requests"] == 1 and s["request_goodput"] == 1.0
    assert s["mean_ttft_ms"] == pytest.approx(300.0)
    assert s["median_tpot_ms"] == pytest.approx(100.0)
    assert s["itl_samples"] == 4 and s["max_itl_ms"] == pytest.approx(100.0)
    assert s["output_throughput"] == 6.0 and s["total_input_tokens"] == 20
    assert s["max_in_flight_requests"] == 3
    assert s["max_concurrent_requests"] == 2  # vLLM's: successful requests active in second 0
    assert s["max_output_tokens_per_s"] == 6.0
    assert s["latencies"] == [pytest.approx(0.3), pytest.approx(0.7), 0.0]
    assert s["queue_times"] == [0.0, 0.0, 0.0] and s["rtfx"] == 0.0
    no_slo = summarize([fast], 1.0, 0.0, 0.0)
    assert no_slo["request_goodput"] is None
