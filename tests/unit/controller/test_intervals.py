"""The statistics core against hand-computed values (STYLE.md 10)."""

from __future__ import annotations

import math
import random

import pytest

from tunelab.analysis.intervals import (
    Estimate,
    Method,
    adjust,
    contrast,
    family_confidence,
    launches_needed,
    positive_interval,
    t_quantile,
)

P = [0.01, 0.04, 0.03, 0.005]


def test_benjamini_hochberg_matches_the_hand_computed_step_up() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> p*m/rank 0.02, 0.02, 0.04, 0.04; running min from the top
    assert adjust(P, Method.BH) == pytest.approx([0.02, 0.04, 0.04, 0.02])


def test_holm_matches_the_hand_computed_step_down() -> None:
    # sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 = 0.02, 0.03, 0.06, 0.04, then running max
    assert adjust(P, Method.HOLM) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_no_correction_and_an_empty_family() -> None:
    assert adjust(P, Method.NONE) == P
    assert adjust([], Method.BH) == []


def test_t_quantiles_are_the_tabled_values() -> None:
    assert t_quantile(0.975, 10) == pytest.approx(2.228138852, abs=1e-8)
    assert t_quantile(0.975, 3) == pytest.approx(3.182446305, abs=1e-8)
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="p must be"):
        t_quantile(1.0, 3)


def test_p_value_of_an_estimate_at_the_critical_t_is_alpha() -> None:
    estimate = Estimate(log_ratio=2.228138852 * 0.1, se=0.1, df=10)
    assert estimate.p_value() == pytest.approx(0.05, abs=1e-8)
    assert Estimate(0.0, 0.0, math.inf).p_value() == 1.0


def test_a_positive_quantity_interval_never_reaches_zero() -> None:
    # Two wildly different launches: a t interval of the raw values would reach far below zero.
    lo, hi = positive_interval([20.0, 1000.0]) or (0.0, 0.0)
    assert 0.0 < lo < 20.0 and hi > 1000.0
    rng = random.Random(7)
    for _ in range(500):
        values = [rng.lognormvariate(5.0, 1.5) for _ in range(rng.randint(2, 5))]
        interval = positive_interval(values)
        assert interval is not None and interval[0] > 0.0


def test_one_launch_gives_no_interval() -> None:
    assert positive_interval([5.0]) is None
    assert contrast([5.0], [4.0, 4.1]) is None


def test_a_ratio_interval_never_falls_below_minus_one() -> None:
    estimate = contrast([1.0, 300.0], [100.0, 101.0])
    assert estimate is not None
    lo, _ = estimate.relative_interval()
    assert lo > -1.0


def test_family_confidence_per_method() -> None:
    assert family_confidence(Method.NONE, 15, 0) == pytest.approx(0.95)
    assert family_confidence(Method.HOLM, 10, 3) == pytest.approx(0.995)
    assert family_confidence(Method.BH, 10, 3) == pytest.approx(0.985)
    assert family_confidence(Method.BH, 10, 0) == pytest.approx(0.995)


def test_launches_needed_grows_as_the_margin_shrinks() -> None:
    estimate = contrast([100.0, 104.0, 98.0], [100.0, 95.0, 103.0])
    assert estimate is not None
    wide = launches_needed(estimate, 3, 0.10)
    narrow = launches_needed(estimate, 3, 0.01)
    assert wide is not None and narrow is not None
    assert wide >= 4 and narrow > wide
