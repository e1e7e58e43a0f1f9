"""Change points over a watch's history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tunelab.analysis.watch.judge import pct

PERMUTATIONS = 499  # a permutation p below 0.01 needs at least 99; 499 resolves 0.002


def _split_stats(x: np.ndarray, min_size: int) -> np.ndarray:
    """Per row of ``x`` (segments of equal length n), the two-sample statistic
    ``k (n - k) / n * (mean_left - mean_right)^2 / pooled variance`` at each split k."""
    n = x.shape[-1]
    ks = np.arange(min_size, n - min_size + 1)
    c1 = np.cumsum(x, axis=-1)
    c2 = np.cumsum(x * x, axis=-1)
    s1, q1 = c1[..., ks - 1], c2[..., ks - 1]
    s_all, q_all = c1[..., -1:], c2[..., -1:]
    s2, q2 = s_all - s1, q_all - q1
    m1, m2 = s1 / ks, s2 / (n - ks)
    within = (q1 - ks * m1 * m1) + (q2 - (n - ks) * m2 * m2)
    var = np.maximum(within / max(n - 2, 1), 1e-300)
    result: np.ndarray = ks * (n - ks) / n * (m1 - m2) ** 2 / var
    return result


def _best_split(x: np.ndarray, min_size: int, rng: np.random.Generator) -> tuple[int, float] | None:
    n = len(x)
    if n < 2 * min_size or float(np.ptp(x)) == 0.0:
        return None
    observed = _split_stats(x, min_size)
    k = int(np.argmax(observed)) + min_size
    shuffled = np.array([rng.permutation(x) for _ in range(PERMUTATIONS)])
    null_max = _split_stats(shuffled, min_size).max(axis=-1)
    p = (1 + int(np.sum(null_max >= observed.max() - 1e-12))) / (PERMUTATIONS + 1)
    return k, p


def change_points(
    series: Sequence[tuple[float, float]], *, min_size: int = 3, max_false_rate: float = 0.01
) -> list[dict[str, Any]]:
    """Hierarchical binary segmentation with a permutation test per candidate (the E-divisive
    scheme of Matteson and James as Otava runs it, with a mean-shift statistic): split the history
    where the two sides differ most, keep the split when shuffling the segment rarely
    (``p <= max_false_rate``) gives as large a difference, and look again inside both sides.

    ``series`` is (started_at, value) per occurrence in time order; each change point names the
    first occurrence after it."""
    xs = np.asarray([v for _, v in series], dtype=float)
    rng = np.random.default_rng(0)  # deterministic: the same history gives the same marks
    found: dict[int, float] = {}
    stack = [(0, len(xs))]
    while stack:
        start, end = stack.pop()
        best = _best_split(xs[start:end], min_size, rng)
        if best is None or best[1] > max_false_rate:
            continue
        k, p = best
        found[start + k] = p
        stack += [(start, start + k), (start + k, end)]
    bounds = [0, *sorted(found), len(xs)]
    out = []
    for j, at in enumerate(bounds[1:-1], start=1):
        before = float(np.mean(xs[bounds[j - 1] : at]))
        after = float(np.mean(xs[at : bounds[j + 1]]))
        out.append(
            {
                "index": at,
                "at": series[at][0],
                "before_mean": before,
                "after_mean": after,
                "change_pct": pct(after / before - 1.0) if before else None,
                "p_value": found[at],
            }
        )
    return out
