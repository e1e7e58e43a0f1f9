"""Variance between and within launches: a one-way random-effects model on log values.

A launch's measurement is cut into *blocks* (consecutive request windows at one load, after
warm-up). A block's log value is ``y = mu_config + a_launch + e_block``: ``a`` is the launch's
own level (engines settle into different levels after a restart), variance ``between``; ``e``
the block's noise, variance ``within``. The contenders of one race share the two components
(they are configurations of one engine on one host class), so they are fitted together, each
configuration with its own mean.

**The fit** is REML (restricted maximum likelihood), the estimator that stays unbiased at a
handful of launches; its likelihood is maximised directly with scipy over one parameter (the
ratio between / within, the within variance profiled out; statsmodels' MixedLM would do the same
with a 30 MB dependency for one variance component). In a balanced design REML equals the
ANOVA estimators ``within = MSW``, ``between = (MSB - MSW) / m`` when those are positive; when
``MSB < MSW`` REML puts ``between`` on its boundary, 0.

**The standard error** of a configuration's mean log value is the generalised-least-squares one
at the fitted components (a long launch weighs more only as far as the within noise is what it
averages). Its degrees of freedom are where the honesty is:

- *blocks never count as launches* unless the between part is **shown negligible**: an upper
  95 % confidence bound (F distribution) on ``between / within`` that adds at most
  ``NEGLIGIBLE`` (half) to the variance of the longest launch's mean (so the standard error
  is at most a fifth too small; it takes tens of launches to show). Then the blocks are replicates
  (df within + between); otherwise the degrees of freedom are the launches' (the sum over
  configurations of launches - 1), whatever the number of blocks, and at the boundary the
  standard error is the pooled one (no smaller than the launches' own spread implies);
- with a **prior** (a remembered noise profile, or ``search.noise:``) the between variance is
  the prior's and this search's pooled by their degrees of freedom, and the degrees of freedom
  of the standard error come from Satterthwaite's rule over the two estimated components. A
  search whose launches contradict the prior (a chi-square test of their spread against it,
  two-sided at ``CONTRADICTION``) says so and is judged on its own data alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import optimize as _optimize
from scipy import stats as _stats

from tunelab.analysis.intervals import Estimate

NEGLIGIBLE = 0.5  # the between part may add at most half to a launch mean's variance
NEGLIGIBLE_LEVEL = 0.95  # ... at this one-sided confidence
CONTRADICTION = 0.01  # a prior is contradicted at this two-sided level
MAX_RATIO = 1e6  # between / within searched up to this


def cv_to_var(cv: float) -> float:
    """The log-scale variance of a log-normal quantity with coefficient of variation ``cv``."""
    return math.log1p(cv * cv)


def var_to_cv(var: float) -> float:
    return math.sqrt(math.expm1(max(var, 0.0)))


@dataclass(frozen=True)
class Launch:
    """One launch of one configuration: its blocks' values (positive, raw scale)."""

    config: str
    blocks: tuple[float, ...]

    @property
    def logs(self) -> tuple[float, ...]:
        return tuple(math.log(v) for v in self.blocks)

    @property
    def mean(self) -> float:
        logs = self.logs
        return sum(logs) / len(logs)


@dataclass(frozen=True)
class Prior:
    """Variance components remembered (a noise profile) or declared (``search.noise:``): log
    variances, and the launch degrees of freedom behind ``between`` (how much evidence)."""

    between: float
    within: float
    df: float


@dataclass(frozen=True)
class Components:
    """The fitted components (log-scale variances) and the evidence behind them."""

    between: float
    within: float
    df_between: int  # sum over configurations of (launches - 1)
    df_within: int  # sum over launches of (blocks - 1)
    launches: int
    blocks: int
    negligible: bool = False  # between shown negligible: blocks count as replicates
    prior: Prior | None = None  # the prior used (None: none given, or contradicted)
    contradicted: bool = False  # a prior was given and this search's launches contradict it

    @property
    def launch_cv(self) -> float:
        return var_to_cv(self.between)

    @property
    def within_cv(self) -> float:
        return var_to_cv(self.within)

    @property
    def df_launch(self) -> float:
        """The degrees of freedom behind ``between``: this search's, plus the prior's."""
        return self.df_between + (self.prior.df if self.prior else 0.0)


def _groups(launches: Sequence[Launch]) -> dict[str, list[tuple[int, float, float]]]:
    """Per configuration, each launch's (blocks, mean log, within sum of squares)."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for launch in launches:
        logs = launch.logs
        mean = sum(logs) / len(logs)
        out.setdefault(launch.config, []).append(
            (len(logs), mean, sum((y - mean) ** 2 for y in logs))
        )
    return out


def _profile(ratio: float, groups: Mapping[str, list[tuple[int, float, float]]]) -> float:
    """-2 x the REML log-likelihood (constants dropped) at ``between / within = ratio``, the
    within variance profiled out."""
    n_obs = sum(m for g in groups.values() for m, _, _ in g)
    q, logdet = 0.0, 0.0
    for g in groups.values():
        weights = [m / (1.0 + ratio * m) for m, _, _ in g]
        total = sum(weights)
        centre = sum(w * y for w, (_, y, _) in zip(weights, g, strict=True)) / total
        q += sum(ss + w * (y - centre) ** 2 for w, (_, y, ss) in zip(weights, g, strict=True))
        logdet += sum(math.log1p(ratio * m) for m, _, _ in g) + math.log(total)
    dof = n_obs - len(groups)
    return dof * math.log(max(q, 1e-300) / dof) + logdet


def reml(launches: Sequence[Launch]) -> tuple[float, float] | None:
    """(between, within) by REML over configurations sharing both; None without two blocks
    more than configurations (nothing to estimate). ``between`` is 0 where no configuration
    has two launches (it cannot be seen) and on the boundary."""
    groups = _groups(launches)
    n_obs = sum(m for g in groups.values() for m, _, _ in g)
    if n_obs - len(groups) < 1:
        return None
    df_between = sum(len(g) - 1 for g in groups.values())
    ratio = 0.0
    if df_between > 0:
        found = _optimize.minimize_scalar(
            lambda t: _profile(math.exp(t), groups),
            bounds=(math.log(1e-8), math.log(MAX_RATIO)),
            method="bounded",
            options={"xatol": 1e-10},
        )
        if _profile(math.exp(found.x), groups) < _profile(0.0, groups):
            ratio = math.exp(found.x)
    weights_q = 0.0
    for g in groups.values():
        weights = [m / (1.0 + ratio * m) for m, _, _ in g]
        total = sum(weights)
        centre = sum(w * y for w, (_, y, _) in zip(weights, g, strict=True)) / total
        weights_q += sum(
            ss + w * (y - centre) ** 2 for w, (_, y, ss) in zip(weights, g, strict=True)
        )
    within = weights_q / (n_obs - len(groups))
    return ratio * within, within


def _mean_squares(
    groups: Mapping[str, list[tuple[int, float, float]]],
) -> tuple[float, float, float]:
    """(MSB, MSW, m0): the between-launch mean square within configurations, the within one,
    and the effective blocks per launch (``E[MSB] = within + m0 * between``)."""
    df_b = sum(len(g) - 1 for g in groups.values())
    df_w = sum(m - 1 for g in groups.values() for m, _, _ in g)
    ssb, ssw, m_sq = 0.0, 0.0, 0.0
    for g in groups.values():
        n_k = sum(m for m, _, _ in g)
        centre = sum(m * y for m, y, _ in g) / n_k
        ssb += sum(m * (y - centre) ** 2 for m, y, _ in g)
        ssw += sum(ss for _, _, ss in g)
        m_sq += n_k - sum(m * m for m, _, _ in g) / n_k
    msb = ssb / df_b if df_b else math.nan
    msw = ssw / df_w if df_w else math.nan
    return msb, msw, (m_sq / df_b if df_b else math.nan)


def fit(launches: Sequence[Launch], prior: Prior | None = None) -> Components | None:
    """The components of a race's launches (configurations sharing them), with the negligible
    test and the prior's check; None when there is nothing to estimate."""
    found = reml(launches)
    if found is None:
        return None
    between, within = found
    groups = _groups(launches)
    df_b = sum(len(g) - 1 for g in groups.values())
    df_w = sum(m - 1 for g in groups.values() for m, _, _ in g)
    n_launches = sum(len(g) for g in groups.values())
    n_blocks = sum(m for g in groups.values() for m, _, _ in g)
    msb, msw, m0 = _mean_squares(groups)
    negligible = False
    if df_b > 0 and df_w > 0 and msw > 0:
        low = float(_stats.f.ppf(1.0 - NEGLIGIBLE_LEVEL, df_b, df_w))
        ratio_upper = max(0.0, (msb / msw / low - 1.0) / m0)
        longest = max(m for g in groups.values() for m, _, _ in g)
        negligible = longest * ratio_upper <= NEGLIGIBLE
    used, contradicted = prior, False
    if prior is not None and df_b > 0 and df_w > 0:
        expected = prior.between * m0 + within  # E[MSB] under the prior
        x = df_b * msb / expected
        p_low = float(_stats.chi2.cdf(x, df_b))
        contradicted = min(p_low, 1.0 - p_low) < CONTRADICTION / 2.0
        if contradicted:
            used = None
    if used is not None:
        between = (used.df * used.between + df_b * between) / (used.df + df_b)
    return Components(
        between, within, df_b, df_w, n_launches, n_blocks, negligible, used, contradicted
    )


@dataclass(frozen=True)
class Mean:
    """A configuration's mean log value, its variance, and the gradient of that variance in
    (between, within) for Satterthwaite's degrees of freedom."""

    value: float
    var: float
    d_between: float
    d_within: float
    launches: int
    blocks: int


def spread(blocks: Sequence[int], between: float, within: float) -> Mean | None:
    """The variance of a generalised-least-squares mean over launches of ``blocks`` blocks each,
    and its gradient in (between, within); its value 0 (the allocation plans with this)."""
    per = [between + within / m for m in blocks]
    if not per or min(per) <= 0.0:
        return None
    var = 1.0 / sum(1.0 / v for v in per)
    # d(1 / sum 1/v_i) = var^2 * sum dv_i / v_i^2
    d_b = var * var * sum(1.0 / (v * v) for v in per)
    d_w = var * var * sum(1.0 / (m * v * v) for m, v in zip(blocks, per, strict=True))
    return Mean(0.0, var, d_b, d_w, len(blocks), sum(blocks))


def config_mean(c: Components, launches: Sequence[Launch], config: str) -> Mean | None:
    """The generalised-least-squares mean of one configuration's log values: each launch mean
    weighed by the inverse of its variance, ``between + within / blocks``."""
    own = [(len(x.blocks), x.mean) for x in launches if x.config == config]
    found = spread([m for m, _ in own], c.between, c.within)
    if found is None:
        return None
    value = found.var * sum(y / (c.between + c.within / m) for m, y in own)
    return Mean(value, found.var, found.d_between, found.d_within, found.launches, found.blocks)


def degrees(c: Components, d_between: float, d_within: float, var: float) -> float:
    """The degrees of freedom of a variance ``var`` built from the components: the launches'
    unless blocks may count (shown negligible) or a prior stands behind ``between``."""
    if c.prior is None:
        return float(c.df_between + c.df_within) if c.negligible else float(c.df_between)
    # Satterthwaite: var(component estimate) = 2 x component^2 / its df
    parts = 0.0
    if c.df_launch > 0:
        parts += (d_between * c.between) ** 2 / c.df_launch
    if c.df_within > 0:
        parts += (d_within * c.within) ** 2 / c.df_within
    return math.inf if parts == 0.0 else var * var / parts


def contrast(
    c: Components, launches: Sequence[Launch], variant: str, reference: str
) -> Estimate | None:
    """``log(variant) - log(reference)`` with the model's standard error and degrees of
    freedom, for ``judge.judge_pair``; None while there is no degree of freedom to judge by."""
    a = config_mean(c, launches, variant)
    b = config_mean(c, launches, reference)
    if a is None or b is None:
        return None
    var = a.var + b.var
    df = degrees(c, a.d_between + b.d_between, a.d_within + b.d_within, var)
    if df < 1.0:
        return None
    return Estimate(a.value - b.value, math.sqrt(var), df)


def launch_spread(values: Mapping[str, Sequence[float]]) -> tuple[float, int] | None:
    """The pooled log variance of launch values around their configuration's mean, and its
    degrees of freedom: what launches vary by where no blocks are measured (between plus the
    within part of one launch's own benchmark, which it cannot separate); None without a
    configuration launched twice."""
    ss, df = 0.0, 0
    for vs in values.values():
        logs = [math.log(v) for v in vs if v > 0]
        if len(logs) < 2:
            continue
        centre = sum(logs) / len(logs)
        ss += sum((y - centre) ** 2 for y in logs)
        df += len(logs) - 1
    return (ss / df, df) if df else None
