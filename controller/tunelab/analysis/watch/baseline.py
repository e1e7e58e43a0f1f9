"""Whether a baseline's spread is usable (docs/watch-judging.md, "Baseline"): a baseline is never
one fragile occurrence.

``first`` pools the first occurrences, their launches as replicates (:func:`decide`):

1. until every metric has ``MIN_VALUES`` launches (``launches: 1`` pools three occurrences);
2. when the first occurrence spreads more than ``POOL_CV`` (one bad launch among three reads
   CV 12 %), until ``SPREAD_POOL`` occurrences: the decision rests on the first occurrence
   alone and the ones pooled after it are fresh, so the pool's spread is not one picked for
   being small (pooling *until* the spread looks small picks luckily small spreads: 9.6
   false alarms per 100 occurrences at 10 % launch noise against 6.8 this way, in
   benchmarks/watch_detection.py's simulation);
3. while the pool spreads more than ``MAX_CV``, up to ``MAX_POOL`` occurrences; a pool still
   that noisy is too noisy to judge against: said, and replaced by a new one.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

POOL_CV = 0.05  # a first occurrence noisier than this is pooled with the next ones
SPREAD_POOL = 3  # occurrences a first baseline pools when its first occurrence is noisy
MAX_CV = 0.15  # a baseline noisier than this (stdev / mean over its launches) is too noisy
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


USE, POOL, REPLACE = "use", "pool", "replace"


def decide(
    pool: Sequence[Mapping[str, Sequence[float]]], metrics: Sequence[str], counts: Sequence[str]
) -> tuple[str, str]:
    """(``USE``, ``POOL`` or ``REPLACE``, why) for a ``first`` pool of occurrences' values."""
    values = pooled(pool, metrics)
    spread = {m: v for m, v in values.items() if m not in counts}
    short = unusable({m: values[m] for m in metrics}, metrics)  # counts only: launches
    if short:
        return POOL, short
    first = {m: cv(pool[0].get(m, ())) for m in spread}
    high = [(m, c) for m, c in first.items() if c is not None and c > POOL_CV]
    if high and len(pool) < SPREAD_POOL:
        m, c = high[0]
        return (
            POOL,
            f"the first occurrence's {m} spreads CV {100 * c:.0f} % > {100 * POOL_CV:.0f} %",
        )
    noisy = unusable(values, counts)
    if noisy:
        return (POOL, noisy) if len(pool) < MAX_POOL else (REPLACE, noisy)
    return USE, ""
