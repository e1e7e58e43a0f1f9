"""``tunelab bench``'s warm-up bar has a count and an ETA (issue 24: it showed neither), and the
point's bar starts again at 0 when measuring begins."""

from __future__ import annotations

import io
import re

from rich.console import Console

from tunelab.bench.console import BenchProgressView
from tunelab.bench.progress import PointProgress, ProgressState


def _state(phase: str, done: int, total: int) -> ProgressState:
    state = ProgressState()
    state.latest = PointProgress(point_index=0, point_count=1, concurrency=4, request_rate=0.0,
                                 phase=phase, requests_done=done, requests_total=total, errors=0,
                                 output_tokens_per_second=0.0, elapsed_seconds=0.0)  # fmt: skip
    return state


def _lines(out: io.StringIO) -> list[str]:
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def test_the_warm_up_bar_counts_and_the_measured_bar_starts_at_zero() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=140, color_system=None)
    with BenchProgressView(True, 1, console=console) as view:
        view.update(_state("warmup", 3, 8))
        view.progress.refresh()  # type: ignore[union-attr]
        warm = _lines(out)[-1]
        view.update(_state("measure", 1, 64))
        view.progress.refresh()  # type: ignore[union-attr]
        measuring = _lines(out)[-1]
    assert "warm-up" in warm and "3/8 warm-up req" in warm and "ETA" in warm, warm
    assert "1/64 req" in measuring and "warm-up" not in measuring, measuring
