"""The load generator's windows: requests binned by when they were sent, ended and streamed,
in-flight time-weighted, latency percentiles per window; hand-computed on fixed times."""

from __future__ import annotations

import pytest

from tunelab.bench.stream import RequestRecord
from tunelab.bench.timeline.client import ClientWindows, percentile


def record(start: float, chunks: list[float], tokens: int, ok: bool = True) -> RequestRecord:
    rec = RequestRecord(index=0, warmup=False, input_len=8, max_tokens=tokens)
    rec.start = rec.sent = start
    rec.chunk_times = chunks
    rec.chunk_tokens = [tokens // len(chunks)] * len(chunks) if chunks else []
    rec.output_tokens = tokens
    rec.end = chunks[-1] if chunks else start + 0.1
    if not ok:
        rec.error_kind = "http_500"
    return rec


def test_requests_are_binned_on_the_agents_grid() -> None:
    # perf_counter 0 is epoch 1000; the grid starts at epoch 1000.5 with 1 s windows
    windows = ClientWindows(1.0, start=1000.5, perf_to_epoch=1000.0)
    windows.add(record(0.6, [0.7, 1.2, 1.7, 2.2], 8))  # sent in window 0, ends in window 1
    windows.add(record(1.6, [1.8, 2.0], 4))
    windows.add(record(2.6, [], 0, ok=False))  # failed in window 2
    windows.mark_point(0, 0.5, 0.6, 3.0, concurrency=2, request_rate=0.0, ramp=False)
    doc = windows.to_dict()
    s = doc["series"]
    assert doc["windows"] == 3
    assert s["client.sent"] == [1.0, 1.0, 1.0]
    assert s["client.completed"] == [0.0, 2.0, 0.0]
    assert s["client.errors"] == [0.0, 0.0, 1.0]
    assert s["client.output_tokens"] == [4.0, 8.0, 0.0]  # 2 per chunk, at the chunk's time
    # in flight: request 1 spans 0.6-2.2 (0.9 + 0.7 s), request 2 1.6-2.0, 3 2.6-2.7
    assert s["client.in_flight"] == pytest.approx([0.9, 0.7 + 0.4, 0.1])
    assert s["client.ttft_p50_ms"][0] == pytest.approx(100.0, rel=0.03)
    assert s["client.ttft_p50_ms"][1] == pytest.approx(200.0, rel=0.03)
    assert s["client.ttft_p50_ms"][2] is None
    assert s["client.itl_p50_ms"][0] == pytest.approx(250.0, rel=0.03)  # 0.5 s per 2 tokens
    assert doc["points"] == [
        {"index": 0, "start_s": 0.0, "measure_s": 0.1, "end_s": 2.5, "concurrency": 2,
         "request_rate": 0.0, "ramp": False}
    ]  # fmt: skip


def test_percentiles_of_the_log_histogram() -> None:
    windows = ClientWindows(1.0, start=1000.0, perf_to_epoch=1000.0)
    for i in range(100):
        windows.add(record(0.01, [0.01 + 0.001 * (i + 1)], 1))  # TTFT 1..100 ms
    hist = windows.ttft[0]
    assert percentile(hist, 0.5) == pytest.approx(50.0, rel=0.03)
    assert percentile(hist, 0.99) == pytest.approx(99.0, rel=0.03)
    assert sum(hist.values()) == 100 and len(hist) < 100  # buckets, not samples
