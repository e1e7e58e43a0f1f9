"""benchmarks/search_efficiency.py's analytic model of the simulator equals the simulator's own
engine run in virtual time (the figures the search-efficiency table rests on)."""

from __future__ import annotations

import pytest

from benchmarks import search_efficiency as se
from tunelab.controller.search.strategies import key


@pytest.mark.parametrize(
    ("n", "t", "s"),
    [(16, 512, 0.3), (128, 1024, 0.2), (32, 4096, 0.2), (16, 8192, 0.3), (16, 16384, 0.2)],
)
def test_the_analytic_schedule_is_what_the_engine_does(n: int, t: int, s: float) -> None:
    analytic = se.finite_run(n, t, s, 160)
    engine = se.virtual_run(n, t, s, 160, concurrency=se.SURFACE.concurrency)
    assert analytic.duration_s == pytest.approx(engine.duration_s, rel=1e-9)
    assert analytic.p99_itl_ms == pytest.approx(engine.p99_itl_ms, rel=1e-9)


def test_long_runs_approach_the_steady_state_formulas() -> None:
    throughput, itl = se.steady_state(128, 512, 0.2)
    full = se.finite_run(128, 512, 0.2, se.SURFACE.full_requests)
    assert full.output_throughput == pytest.approx(throughput, rel=0.01)
    assert full.p99_itl_ms == pytest.approx(itl)
    assert itl == pytest.approx(se.SURFACE.base_ms + 0.2 * 128 + se.SURFACE.prefill_ms * 512)


def test_the_optimum_of_the_surface() -> None:
    values, optimum, params = se.truth()
    assert params == {se.SEQS: 128, se.TOKENS: 1024, se.PER_SEQ: 0.2}
    assert values[key({se.SEQS: 256, se.TOKENS: 512, se.PER_SEQ: 0.2})] is None  # OOM
    assert optimum == pytest.approx(3129.4, abs=0.1)
