"""Confidence intervals for ratios of means over a handful of repeated launches.

A change's effect is a *log contrast* of cell means: ``log(variant) - log(baseline)`` for an
ablation step, an average of such differences for a matrix main effect, and a difference of
differences for an interaction. Its standard error comes from the delta method
(``var log m ~= s^2 / (n m^2)``) and its degrees of freedom from Welch-Satterthwaite, so cells
may have different spreads and sizes. With 3-5 launches a cell, a t interval with those degrees
of freedom is honest where a bootstrap is not: resampling five values gives few distinct means
and a percentile interval that is too narrow.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Cell:
    """The values of one metric at one load point over the launches of one variant."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def cv(self) -> float:
        """Coefficient of variation; infinite when the mean is not positive."""
        return self.stdev / self.mean if self.mean > 0 else math.inf


@dataclass(frozen=True)
class Estimate:
    """A log contrast: its value, standard error and Welch-Satterthwaite degrees of freedom."""

    log_ratio: float
    se: float
    df: float

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def relative_interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The interval of ``ratio - 1`` (a relative difference: -0.5 is half, 0.1 is +10 %)."""
        if self.se == 0.0:
            return self.ratio - 1.0, self.ratio - 1.0
        half = t_quantile(0.5 + confidence / 2.0, self.df) * self.se
        return math.exp(self.log_ratio - half) - 1.0, math.exp(self.log_ratio + half) - 1.0


def log_contrast(terms: Sequence[tuple[float, Cell]]) -> Estimate | None:
    """``sum(w * log(mean))`` over weighted cells; None when a cell has no positive mean or
    fewer than two values (no spread to estimate)."""
    if any(cell.n < 2 or cell.mean <= 0 for _, cell in terms):
        return None
    value = sum(w * math.log(cell.mean) for w, cell in terms)
    parts = [(w * w * cell.stdev**2 / (cell.n * cell.mean**2), cell.n - 1) for w, cell in terms]
    var = sum(v for v, _ in parts)
    if var == 0.0:
        return Estimate(value, 0.0, math.inf)
    denominator = sum(v * v / dof for v, dof in parts)
    return Estimate(value, math.sqrt(var), var * var / denominator)


# --- Student's t quantile (fractional degrees of freedom, as Welch's needs) ---------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    if math.isinf(df):
        return statistics.NormalDist().cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if math.isinf(df) or df > 1e7:
        return statistics.NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0
