"""Whether a baseline's spread is usable (docs/watch-judging.md, "Baseline"): a baseline is never
one fragile occurrence. ``first`` pools the first occurrences, as replicates, until every metric
has at least ``MIN_VALUES`` launches and a spread of at most ``POOL_CV`` (one bad launch among
three reads CV 12 %: pooling dilutes it), for at most ``MAX_POOL`` occurrences; a pool still
noisier than ``MAX_CV`` then is too noisy to judge against: said, and replaced by a new one. A
pool between the two is used, and each verdict says the smallest change it can see."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

POOL_CV = 0.05  # a first baseline pools more occurrences while it is noisier than this
MAX_CV = 0.10  # a baseline noisier than this (stdev / mean over its launches) is too noisy
MIN_VALUES = 3  # launches a pooled baseline holds at least, per metric
MAX_POOL = 5  # occurrences pooled at most before a noisy baseline is replaced


def cv(values: Sequence[float]) -> float | None:
    """stdev / mean, None below two values or for a mean <= 0."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else None


def pooled(
    values: Sequence[Mapping[str, Sequence[float]]], metrics: Sequence[str]
) -> dict[str, tuple[float, ...]]:
    """Each metric's launches over several occurrences, as one set of replicates."""
    return {m: tuple(v for doc in values for v in doc.get(m, ())) for m in metrics}


def unusable(
    pool: Mapping[str, Sequence[float]], counts: Sequence[str] = (), limit: float = MAX_CV
) -> str:
    """Why ``pool`` cannot serve as a baseline ("" when it can): fewer than ``MIN_VALUES``
    launches, or a CV above ``limit``; ``counts`` are metrics whose spread is not judged by
    their CV (a count of failures, mostly 0)."""
    for metric, values in pool.items():
        if len(values) < MIN_VALUES:
            plural = "es" if len(values) != 1 else ""
            return f"{metric} has {len(values)} launch{plural} (at least {MIN_VALUES})"
        spread = cv(values) if metric not in counts else None
        if spread is not None and spread > limit:
            return f"{metric} spreads CV {100 * spread:.0f} % > {100 * limit:.0f} %"
    return ""
