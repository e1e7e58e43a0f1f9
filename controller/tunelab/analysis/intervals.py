"""The statistics every verdict rests on: intervals over launches, tests, and a family's correction.

**The launch is the unit of evidence** (DESIGN.md, "Answers"): engines vary most between
restarts, so each value handed in here is one launch's figure (a cell of values at one load
point, one per launch). Points inside one launch are not independent repeats and must not be
passed as such.

A change's effect is a *log contrast* of cell means: ``log(variant) - log(baseline)`` for an
ablation step, an average of such differences for a matrix main effect, a difference of
differences for an interaction. Its standard error comes from the delta method
(``var log m ~= s^2 / (n m^2)``) and its degrees of freedom from Welch-Satterthwaite, so cells may
have different spreads and sizes. With 3-5 launches a cell a t interval with those degrees of
freedom is honest where a bootstrap is not (resampling five values gives few distinct means and a
percentile interval too narrow). Intervals are built on the log scale, so the interval of a
positive quantity or of a ratio never crosses zero.

A report's rows are one family: :func:`adjust` controls the false discovery rate across them
(Benjamini-Hochberg) or the family-wise error (Holm), and :func:`family_confidence` gives the
level of the intervals printed beside the adjusted verdicts (Benjamini-Yekutieli's
false-coverage-rate intervals for BH, Bonferroni's for Holm). The distributions come from
``scipy.stats``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from scipy import stats as _stats

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE


class Method(StrEnum):
    """How a family of tests is corrected."""

    BH = "benjamini-hochberg"  # false discovery rate
    HOLM = "holm"  # family-wise error rate
    NONE = "none"  # each row judged alone (only where a family has one row)


MAX_MEASURED = 1e15  # above any throughput, latency, token count or byte count measured here


def measured(value: Any) -> float | None:
    """A number the statistics may take: finite and within +-MAX_MEASURED; else None. A result
    may hold anything (an external benchmark's JSON, a server's 10**200 tokens), and squaring
    10**200 is an OverflowError: every value reaches a statistic through here."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_MEASURED:
        return None  # float() of a 400-digit int is itself an OverflowError
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= MAX_MEASURED else None


@dataclass(frozen=True)
class Cell:
    """The values of one metric at one load point, one value per launch."""

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

    def log_interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        if self.se == 0.0:
            return self.log_ratio, self.log_ratio
        half = t_quantile(0.5 + confidence / 2.0, self.df) * self.se
        return self.log_ratio - half, self.log_ratio + half

    def relative_interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The interval of ``ratio - 1`` (a relative difference: -0.5 is half, 0.1 is +10 %)."""
        lo, hi = self.log_interval(confidence)
        return math.exp(lo) - 1.0, math.exp(hi) - 1.0

    def p_value(self) -> float:
        """Two-sided p of "no difference" (a log ratio of 0)."""
        if self.se == 0.0:
            return 1.0 if self.log_ratio == 0.0 else 0.0
        return float(2.0 * _stats.t.sf(abs(self.log_ratio) / self.se, self.df))


def log_contrast(terms: Sequence[tuple[float, Cell]]) -> Estimate | None:
    """``sum(w * log(mean))`` over weighted cells; None when a cell has no positive mean or
    fewer than two launches (no spread to estimate)."""
    if any(measured(v) is None for _, cell in terms for v in cell.values):
        return None  # out of range: no estimate rather than an OverflowError
    if any(cell.n < 2 or cell.mean <= 0 for _, cell in terms):
        return None
    value = sum(w * math.log(cell.mean) for w, cell in terms)
    parts = [(w * w * cell.stdev**2 / (cell.n * cell.mean**2), cell.n - 1) for w, cell in terms]
    var = sum(v for v, _ in parts)
    if var == 0.0:
        return Estimate(value, 0.0, math.inf)
    denominator = sum(v * v / dof for v, dof in parts)
    return Estimate(value, math.sqrt(var), var * var / denominator)


def contrast(variant: Sequence[float], baseline: Sequence[float]) -> Estimate | None:
    """``variant`` against ``baseline``, each one value per launch: ``log(mean v / mean b)``."""
    return log_contrast([(1.0, Cell(tuple(variant))), (-1.0, Cell(tuple(baseline)))])


def positive_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """The interval of a positive quantity's mean over launches, built on the log scale (delta
    method) so it never reaches zero or below; None below two launches or for a value <= 0."""
    estimate = log_contrast([(1.0, Cell(tuple(values)))])
    if estimate is None:
        return None
    lo, hi = estimate.log_interval(confidence)
    return math.exp(lo), math.exp(hi)


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with ``df`` (possibly fractional, or infinite) degrees."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if math.isinf(df):
        return float(_stats.norm.ppf(p))
    return float(_stats.t.ppf(p, df))


def adjust(p_values: Sequence[float], method: Method) -> list[float]:
    """Adjusted p values of a family, in the input's order: a row is a discovery at level
    ``alpha`` when its adjusted p is <= alpha."""
    m = len(p_values)
    if m == 0:
        return []
    if method is Method.NONE:
        return [float(p) for p in p_values]
    if method is Method.BH:
        return [float(p) for p in _stats.false_discovery_control(list(p_values), method="bh")]
    order = sorted(range(m), key=lambda i: p_values[i])  # Holm's step-down
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def family_confidence(
    method: Method, family_size: int, discoveries: int, alpha: float = ALPHA
) -> float:
    """The confidence of the intervals printed beside a corrected family's verdicts.

    BH: Benjamini-Yekutieli false-coverage-rate intervals, at ``1 - R alpha / m`` for R
    discoveries (``1 - alpha / m`` when there are none); Holm: Bonferroni's ``1 - alpha / m``;
    none: ``1 - alpha``."""
    m = max(family_size, 1)
    if method is Method.NONE:
        return 1.0 - alpha
    if method is Method.HOLM:
        return 1.0 - alpha / m
    return 1.0 - max(discoveries, 1) * alpha / m


def launches_needed(
    estimate: Estimate, n: int, margin: float, confidence: float = CONFIDENCE
) -> int | None:
    """About how many launches per side would shrink the interval's half-width to ``margin``
    (a relative effect, 0.02 for 2 %) at the spread seen so far; None when nothing can be said."""
    if estimate.se == 0.0 or margin <= 0.0 or n < 2:
        return None
    half = t_quantile(0.5 + confidence / 2.0, max(estimate.df, 1.0)) * estimate.se
    ratio = half / math.log1p(margin)
    if not math.isfinite(ratio) or ratio > 1e6:
        return None  # more launches than anyone would run (a margin of 1e-300): nothing to say
    return max(n + 1, math.ceil(n * ratio**2))
