"""Blocks: whole runs of windows inside a point's measured span, with hand-computed sums."""

from __future__ import annotations

from typing import Any

import pytest

from tunelab.analysis.timeline.blocks import blocks, measured_windows
from tunelab.analysis.timeline.model import TimelineError, parse


def doc(
    windows: int, step: float = 1.0, series: dict[str, list[Any]] | None = None
) -> dict[str, Any]:
    return {
        "timeline": 1,
        "step_seconds": step,
        "start": 1000.0,
        "windows": windows,
        "series": series or {},
        "points": [
            {"index": 0, "start_s": 0.0, "measure_s": 2.5, "end_s": 12.0},
            {"index": 1, "start_s": 12.0, "measure_s": 13.0, "end_s": 20.0},
        ],
    }


def test_measured_windows_skip_the_warmup_and_partial_windows() -> None:
    timeline = parse(doc(20))
    assert measured_windows(timeline, 0) == range(3, 12)  # 2.5 s: window 2 is part warm-up
    assert measured_windows(timeline, 1) == range(13, 20)
    assert measured_windows(timeline, 7) == range(0)


def test_blocks_are_whole_and_sum_their_windows() -> None:
    completed = [float(w) for w in range(20)]
    tokens = [10.0 * w for w in range(20)]
    timeline = parse(
        doc(20, series={"client.completed": completed, "client.output_tokens": tokens})
    )
    got = blocks(timeline, 0, block_seconds=4.0)
    # windows 3..11: two whole blocks of 4 (3-6, 7-10); window 11 is left over
    assert [(b.first_window, b.windows) for b in got] == [(3, 4), (7, 4)]
    assert got[0].completed == 3 + 4 + 5 + 6
    assert got[0].output_tokens == 180.0
    assert got[0].output_throughput == pytest.approx(45.0)
    assert got[1].start_s == 7.0 and got[1].duration_s == 4.0


def test_blocks_round_to_whole_windows_at_a_finer_step() -> None:
    timeline = parse(doc(80, step=0.25, series={"client.completed": [1.0] * 80}))
    got = blocks(timeline, 1, block_seconds=2.0)  # 8 windows each, in 13 s .. 20 s
    assert [b.first_window for b in got] == [52, 60, 68]
    assert all(b.completed == 8 and b.duration_s == 2.0 for b in got)


def test_a_missing_series_counts_zero_and_a_bad_document_is_refused() -> None:
    timeline = parse(doc(20))
    assert [b.completed for b in blocks(timeline, 0, 3.0)] == [0, 0, 0]
    with pytest.raises(TimelineError, match=r"series.client.completed"):
        parse(doc(20, series={"client.completed": [1.0] * 3}))
    with pytest.raises(TimelineError, match="step_seconds"):
        parse({**doc(20), "step_seconds": float("nan")})
