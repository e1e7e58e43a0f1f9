"""Change points over a watch's history: Student's t on the split (as Apache Otava), with a
relative tie tolerance, on a bounded window."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

from tunelab.analysis.watch.changes import TIE, change_points, marks, student_p


def series(values: list[float]) -> list[tuple[float, float]]:
    return [(float(i), v) for i, v in enumerate(values)]


def test_three_flat_then_four_after_a_24_percent_step_mark_a_change() -> None:
    """Issue 43: the permutation tester gave no mark here (it needs about 12 occurrences)."""
    found = change_points(series([100.0, 101.0, 99.0, 76.0, 77.0, 75.0, 76.0]))
    assert len(found) == 1
    mark = found[0]
    assert mark["index"] == 3 and mark["change_pct"] == -24.0
    assert (mark["before_mean"], mark["after_mean"]) == (100.0, 76.0)
    # by hand, on the logs: Student's t with 3 + 4 - 2 = 5 degrees of freedom
    left = np.log([100.0, 101.0, 99.0])
    right = np.log([76.0, 77.0, 75.0, 76.0])
    ss = float(np.sum((left - left.mean()) ** 2) + np.sum((right - right.mean()) ** 2))
    t = (left.mean() - right.mean()) / math.sqrt(ss / 5 * (1 / 3 + 1 / 4))
    assert t == pytest.approx(34.4, rel=0.01)  # 0.2744 / sqrt(0.000546 / 5 * 7 / 12)
    assert mark["p_value"] == pytest.approx(2 * stats.t.sf(t, 5), rel=1e-9)
    assert mark["p_value"] < 1e-6


def test_student_p_matches_scipy() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(0.0, 1.0, 5), rng.normal(0.7, 1.0, 6)
    assert student_p(a, b, 0.0) == pytest.approx(stats.ttest_ind(a, b).pvalue, rel=1e-9)


def test_rounding_noise_is_a_tie_not_a_step() -> None:
    """An absolute tolerance of 1e-12 read float rounding (~1e-7) as a real spread."""
    flat = [1000.0 * (1 + 1e-7 * ((i * 7) % 3 - 1)) for i in range(12)]
    assert change_points(series(flat)) == []
    assert TIE > 1e-7
    # two flat stretches apart: p 0 (no spread, a difference)
    found = change_points(series([5.0] * 3 + [4.0] * 3))
    assert [(m["index"], m["p_value"]) for m in found] == [(3, 0.0)]


def test_no_mark_on_flat_noise() -> None:
    rng = random.Random(11)
    marked = sum(
        bool(change_points(series([rng.gauss(1000.0, 30.0) for _ in range(30)])))
        for _ in range(200)
    )
    assert marked <= 10  # max over the splits at p 0.001: about 2 % of 30-long histories


def test_a_slow_drift_is_marked() -> None:
    values = [1000.0 * (1 - 0.01 * i) for i in range(20)]
    assert change_points(series(values))


def test_min_magnitude_drops_a_step_smaller_than_the_margin() -> None:
    values = [1000.0, 1000.5, 999.5, 990.0, 990.5, 989.5]  # -1 %, very clear
    assert change_points(series(values))
    assert change_points(series(values), min_magnitude=0.02) == []


def test_marks_name_the_occurrence_and_the_direction() -> None:
    window = [(10 + i, float(i), v) for i, v in enumerate([100.0, 101.0, 99.0, 130, 131, 129])]
    latency = marks(window, "p99_ttft_ms@c8", 0.05, higher_is_better=False)
    assert latency == [
        {"occurrence": 13, "metric": "p99_ttft_ms@c8", "change_pct": 30.0,
         "p": latency[0]["p"], "shift": "worse"}
    ]  # fmt: skip
    assert marks(window, "output_throughput", 0.05, higher_is_better=True)[0]["shift"] == "better"


def test_counts_with_zeros_are_tested_on_their_own_scale() -> None:
    found = change_points(series([0.0, 0.0, 0.0, 5.0, 6.0, 5.0]))
    assert [m["index"] for m in found] == [3]
