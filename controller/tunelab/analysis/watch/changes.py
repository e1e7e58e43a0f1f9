"""Change points over a watch's history, with power on short histories.

The method is the one Apache Otava (Hunter, Fleming et al. 2023) runs, on the log of one mean per
occurrence: split a stretch where Student's t between the two sides is largest, keep the split
when that t's two-sided p is at most ``max_p``, look again inside both sides; then a merge pass
re-tests each kept split against its neighbours and drops the weakest while one fails (p above
``max_p``, or a change smaller than ``min_magnitude``). A t-test on the split has power from a
few occurrences a side (3 flat then 4 after a -24 % step is found), where a permutation test of
499 shuffles cannot go below p 0.002 and needs about twelve.

Values equal to within a relative ``TIE`` (1e-6: above the ~1e-7 rounding of stored means,
far below any real change) count as equal, so rounding noise is never read as a spread or a
step. The caller passes a bounded window of the history (``WINDOW`` occurrences), so the cost
never grows with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as _stats

MAX_P = 0.001  # Otava's default: a split kept at p <= 0.001
WINDOW = 100  # occurrences searched: the newest ones
TIE = 1e-6  # relative: values this close are equal (rounding in the store is ~1e-7)


def _scale(values: np.ndarray) -> np.ndarray:
    """Logs (a step is relative, as the verdicts are), or the values themselves where some
    are not positive (a count of failed requests)."""
    return np.log(values) if bool(np.all(values > 0)) else values


def _tolerance(x: np.ndarray, raw: np.ndarray) -> float:
    """A spread below this is rounding: relative to the values' size (on the log scale the
    relative tie is the tolerance itself)."""
    return TIE if x is not raw else TIE * max(1.0, float(np.max(np.abs(raw))))


def student_p(left: np.ndarray, right: np.ndarray, tol: float) -> float:
    """Two-sided p of Student's t (pooled variance) between two sides; 0 for two flat sides
    apart, 1 for no difference within ``tol``."""
    n1, n2 = len(left), len(right)
    diff = float(np.mean(right) - np.mean(left))
    within = float(np.sum((left - left.mean()) ** 2) + np.sum((right - right.mean()) ** 2))
    if abs(diff) <= tol:
        return 1.0
    df = n1 + n2 - 2
    if df < 1:
        return 1.0
    var = within / df
    if var <= tol * tol:
        return 0.0
    t = abs(diff) / math.sqrt(var * (1.0 / n1 + 1.0 / n2))
    return float(2.0 * _stats.t.sf(t, df))


def _best_split(x: np.ndarray, min_size: int, tol: float) -> tuple[int, float] | None:
    """The split of ``x`` with the largest t (pooled), and its p."""
    n = len(x)
    if n < 2 * min_size or float(np.ptp(x)) <= tol:
        return None
    ks = np.arange(min_size, n - min_size + 1)
    c1, c2 = np.cumsum(x), np.cumsum(x * x)
    s1, q1 = c1[ks - 1], c2[ks - 1]
    s2, q2 = c1[-1] - s1, c2[-1] - q1
    m1, m2 = s1 / ks, s2 / (n - ks)
    within = np.maximum((q1 - ks * m1 * m1) + (q2 - (n - ks) * m2 * m2), 0.0)
    gap = (m1 - m2) ** 2 * ks * (n - ks) / n
    score = gap / np.maximum(within, tol * tol)  # t^2 up to the constant df
    k = int(ks[int(np.argmax(score))])
    return k, student_p(x[:k], x[k:], tol)


def _split(x: np.ndarray, min_size: int, max_p: float, tol: float) -> list[int]:
    found: list[int] = []
    stack = [(0, len(x))]
    while stack:
        start, end = stack.pop()
        best = _best_split(x[start:end], min_size, tol)
        if best is None or best[1] > max_p:
            continue
        found.append(start + best[0])
        stack += [(start, start + best[0]), (start + best[0], end)]
    return sorted(found)


def _merge(
    x: np.ndarray,
    raw: np.ndarray,
    points: list[int],
    max_p: float,
    min_magnitude: float,
    tol: float,
) -> list[tuple[int, float]]:
    """Otava's merge: re-test each split between its neighbours, drop the weakest failing one
    and test again until every split holds."""
    while points:
        bounds = [0, *points, len(x)]
        tested = []
        for j, at in enumerate(points, start=1):
            left, right = x[bounds[j - 1] : at], x[at : bounds[j + 1]]
            before = float(np.mean(raw[bounds[j - 1] : at]))
            after = float(np.mean(raw[at : bounds[j + 1]]))
            magnitude = abs(after / before - 1.0) if before else math.inf
            tested.append((student_p(left, right, tol), magnitude, at))
        weakest = max(tested)
        if weakest[0] > max_p:
            points.remove(weakest[2])
            continue
        smallest = min(tested, key=lambda t: t[1])
        if smallest[1] < min_magnitude:
            points.remove(smallest[2])
            continue
        return [(at, p) for p, _, at in tested]
    return []


def change_points(
    series: Sequence[tuple[float, float]],
    *,
    min_size: int = 3,
    max_p: float = MAX_P,
    min_magnitude: float = 0.0,
) -> list[dict[str, Any]]:
    """Change points of ``series`` ((started_at, value) per occurrence, in time order): each
    names the position of the first occurrence after it (``index``), the means before and after
    (over the neighbouring stretches), ``change_pct`` and the t-test's ``p_value``."""
    raw = np.asarray([v for _, v in series], dtype=float)
    if len(raw) < 2 * min_size or not bool(np.all(np.isfinite(raw))):
        return []
    x = _scale(raw)
    tol = _tolerance(x, raw)
    kept = _merge(x, raw, _split(x, min_size, max_p, tol), max_p, min_magnitude, tol)
    bounds = [0, *(at for at, _ in kept), len(raw)]
    out = []
    for j, (at, p) in enumerate(kept, start=1):
        before = float(np.mean(raw[bounds[j - 1] : at]))
        after = float(np.mean(raw[at : bounds[j + 1]]))
        out.append(
            {
                "index": at,
                "at": series[at][0],
                "before_mean": before,
                "after_mean": after,
                "change_pct": round(100.0 * (after / before - 1.0), 2) if before else None,
                "p_value": p,
            }
        )
    return out


def marks(
    window: Sequence[tuple[int, float, float]], metric: str, margin: float, higher_is_better: bool
) -> list[dict[str, Any]]:
    """Change points of one metric over a window of (occurrence, started_at, mean), oldest
    first, each a step of at least ``margin``: ``{occurrence, metric, change_pct, p, shift}``,
    ``occurrence`` the first after the step, ``shift`` "worse" or "better" by the metric's
    direction (``watch show --json``'s ``change_points``; the state's input)."""
    found = change_points([(at, mean) for _, at, mean in window], min_magnitude=margin)
    out = []
    for mark in found:
        change = mark["change_pct"]
        if change is None:
            continue
        worse = (change < 0) == higher_is_better
        out.append(
            {
                "occurrence": window[mark["index"]][0],
                "metric": metric,
                "change_pct": change,
                "p": mark["p_value"],
                "shift": "worse" if worse else "better",
            }
        )
    return out
