"""Variance components: REML against hand-computed ANOVA values, the boundary, the negligible
test, the prior and its contradiction, and coverage by simulation."""

from __future__ import annotations

import math
import random

import pytest

from tunelab.analysis import variance
from tunelab.analysis.variance import Launch, Prior


def _launches(config: str, rows: list[list[float]]) -> list[Launch]:
    """Launches from log values (easier to compute by hand)."""
    return [Launch(config, tuple(math.exp(y) for y in row)) for row in rows]


def test_reml_equals_the_anova_estimators_in_a_balanced_design() -> None:
    # config a: launch means 1.0 and 1.2 ; config b: 2.0 and 2.4 ; 3 blocks each, offsets -d, 0, +d
    rows_a = [[1.0 - 0.05, 1.0, 1.0 + 0.05], [1.2 - 0.05, 1.2, 1.2 + 0.05]]
    rows_b = [[2.0 - 0.05, 2.0, 2.0 + 0.05], [2.4 - 0.05, 2.4, 2.4 + 0.05]]
    launches = _launches("a", rows_a) + _launches("b", rows_b)
    # by hand: SSW = 4 launches x 2 x 0.05^2 = 0.02 over 8 df -> MSW = 0.0025
    # SSB = 3 x (0.1^2 + 0.1^2 + 0.2^2 + 0.2^2) = 0.3 over 2 df -> MSB = 0.15
    # between = (MSB - MSW) / 3 = 0.0491666...
    found = variance.reml(launches)
    assert found is not None
    between, within = found
    assert within == pytest.approx(0.0025, rel=1e-6)
    assert between == pytest.approx((0.15 - 0.0025) / 3, rel=1e-6)
    c = variance.fit(launches)
    assert c is not None and c.df_between == 2 and c.df_within == 8
    est = variance.contrast(c, launches, "b", "a")
    assert est is not None
    # the difference of launch-mean averages; se^2 = MSB / 6 + MSB / 6 (launches are the unit)
    assert est.log_ratio == pytest.approx(2.2 - 1.1)
    assert est.se == pytest.approx(math.sqrt(2 * 0.15 / 6), rel=1e-6)
    assert est.df == 2.0


def test_the_boundary_pools_the_variance_but_keeps_the_launch_degrees_of_freedom() -> None:
    # launch means 0.05 apart within a config: SSB = 2 x 3 x 2 x 0.025^2 = 0.0075 over 2 df,
    # MSB = 0.00375 < MSW = 0.01, so REML's between is 0
    rows = [[1.0 - 0.1, 1.0, 1.0 + 0.1], [1.05 - 0.1, 1.05, 1.05 + 0.1]]
    launches = _launches("a", rows) + _launches("b", [[y + 0.5 for y in r] for r in rows])
    c = variance.fit(launches)
    assert c is not None and c.between == 0.0
    # pooled within: (SSW 4 x 0.02 = 0.08, + SSB 0.0075) over N - K = 10
    assert c.within == pytest.approx(0.00875)
    assert not c.negligible  # two launches a side cannot show it
    est = variance.contrast(c, launches, "b", "a")
    assert est is not None and est.df == 2.0  # not 8 + 2: blocks are not launches
    assert est.se == pytest.approx(math.sqrt(2 * 0.00875 / 6))


def test_one_launch_each_without_a_prior_gives_no_estimate() -> None:
    launches = _launches("a", [[1.0, 1.1, 0.9]]) + _launches("b", [[2.0, 2.1, 1.9]])
    c = variance.fit(launches)
    assert c is not None and c.df_between == 0
    assert variance.contrast(c, launches, "b", "a") is None


def test_negligible_between_lets_blocks_count() -> None:
    # it takes many launches to show: an upper bound with few launch degrees of freedom is wide
    rng = random.Random(3)
    launches = [
        Launch(k, tuple(math.exp(rng.gauss(0.0, 0.02)) for _ in range(5)))
        for k in ("a", "b")
        for _ in range(40)
    ]
    c = variance.fit(launches)
    assert c is not None and c.negligible
    est = variance.contrast(c, launches, "b", "a")
    assert est is not None and est.df == c.df_between + c.df_within


def test_a_prior_decides_with_one_launch_each_and_a_contradicted_one_is_dropped() -> None:
    rng = random.Random(5)
    quiet = Prior(variance.cv_to_var(0.003), variance.cv_to_var(0.02), 20.0)
    launches = [
        Launch(k, tuple(math.exp(shift + rng.gauss(0.0, 0.02)) for _ in range(10)))
        for k, shift in (("a", 0.0), ("b", 0.1))
    ]
    c = variance.fit(launches, quiet)
    assert c is not None and c.prior == quiet and not c.contradicted
    est = variance.contrast(c, launches, "b", "a")
    assert est is not None and est.df > 10 and est.relative_interval()[0] > 0.05
    # launches 10 % apart from one another contradict a 0.3 % profile
    noisy = [*launches, Launch("a", tuple(math.exp(0.15 + rng.gauss(0, 0.02)) for _ in range(10)))]
    c2 = variance.fit(noisy, quiet)
    assert c2 is not None and c2.contradicted and c2.prior is None
    est2 = variance.contrast(c2, noisy, "b", "a")
    assert est2 is not None and est2.df == 1.0  # its own data: one launch degree of freedom


def _coverage(between_cv: float, within_cv: float, launches: int, blocks: int, reps: int) -> float:
    rng = random.Random(11)
    sb, sw = math.sqrt(variance.cv_to_var(between_cv)), math.sqrt(variance.cv_to_var(within_cv))
    covered = 0
    for _ in range(reps):
        data = [
            Launch(k, tuple(math.exp(a + rng.gauss(0.0, sw)) for _ in range(blocks)))
            for k in ("a", "b")
            for a in [rng.gauss(0.0, sb) for _ in range(launches)]
        ]
        c = variance.fit(data)
        assert c is not None
        est = variance.contrast(c, data, "b", "a")
        assert est is not None
        lo, hi = est.log_interval(0.95)
        covered += lo <= 0.0 <= hi
    return covered / reps


def test_coverage_is_nominal_at_launch_cv_10_percent_with_3_blocks_a_launch() -> None:
    # the launch noise dominates: were blocks taken for launches, coverage would fall far
    # below 95 % (se too small, df too large); 600 replicates: 95 % +- 2 se is 93.2-96.8 %
    assert _coverage(0.10, 0.02, 3, 3, 600) >= 0.93
    assert _coverage(0.10, 0.10, 3, 3, 600) >= 0.93
