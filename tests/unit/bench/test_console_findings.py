"""``tunelab bench``'s summary says what its figures are not (issue 46.5): gaps of chunks the
client read together, the "rate" of one request or of a trace stopped early, and the approximate
lengths once."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tunelab.bench.console import render_summary
from tunelab.bench.datasets import APPROXIMATE


def _point(**changes: Any) -> dict[str, Any]:
    point = {
        "concurrency": 0, "request_rate": "inf", "dataset": "trace", "completed": 4,
        "failed": 0, "request_throughput": 4.09, "output_throughput": 80.0,
        "mean_input_tokens": 20.0, "errors_by_kind": {}, "point_index": 0,
        **{f"{s}_{m}_ms": 1.0 for s in ("mean", "median", "p99")
           for m in ("ttft", "tpot", "itl_per_token", "e2el")},
    }  # fmt: skip
    point.update(changes)
    return point


def _summary(*points: dict[str, Any], warnings: tuple[str, ...] = ()) -> str:
    document = {
        "config": {"model": "m"}, "status": "stopped", "points": list(points),
        "dataset": {"name": "trace", "lengths": APPROXIMATE, "lengths_exact": False},
        "warnings": list(warnings),
    }  # fmt: skip
    out = io.StringIO()
    render_summary(document, decode=False, console=Console(file=out, width=100))
    return out.getvalue()


def test_a_median_gap_of_0_ms_is_said_to_be_the_clients_batching_not_the_servers() -> None:
    shown = _summary(_point(median_itl_per_token_ms=0.0, p99_itl_per_token_ms=8.1))
    assert "batched" in shown and "0.0 / 8.1" not in shown
    assert "the client read most chunks together" in shown


def test_one_request_or_a_trace_stopped_early_has_no_rate() -> None:
    one = _summary(_point(completed=1, interrupted=True))
    assert "4.09" not in one and "one request completed: no rate" in one
    stopped = _summary(_point(completed=3, interrupted=True))
    assert "4.09" not in stopped and "stopped after 3 requests" in stopped
    assert "4.09" in _summary(_point(completed=3))  # a trace that ran to its end: its rate


def test_approximate_lengths_are_said_once() -> None:
    warning = (
        "lengths are approximate: without a tokenizer (--tokenizer, or benchmark.tokenizer in a "
        "spec) a length of N is N common words"
    )
    shown = _summary(_point(), warnings=(warning,))
    assert shown.count("approximate") == 1, shown
    for line in shown.splitlines():
        assert len(line.rstrip()) <= 100, line
