"""One occurrence against the baseline, through the one rule (``tunelab.analysis.judge``).

The watch's metrics are one Benjamini-Hochberg family: each metric's log contrast over launches
(``intervals.contrast``) goes to :func:`judge_pair` with the family's false-coverage-rate
confidence and whether the correction let it through; the metric's direction is the catalogue's
(``NAME@KEY`` parsed once, so ``p99_ttft_ms@c8`` is a latency: slower is a regression). A count
(``failed``, ``completed``) is compared as count + 1, so zero failures on both sides is a ratio
of 1 rather than no estimate at all.

An undecided metric says what the watch can see at its noise: the half-width of its interval
("no change detected; at this noise it sees changes of ±7 % or more"), and how many launches
would decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.intervals import ALPHA, Estimate, Method, adjust, contrast, family_confidence
from tunelab.analysis.judge import Judgement, Verdict, judge_pair, wording
from tunelab.analysis.metrics import Metric, parse_metric

REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED = (
    "regression",
    "improvement",
    "no change",
    "undecided",
)
COUNTS = "requests"  # the unit of a count metric


@dataclass(frozen=True)
class Occurrence:
    """One scheduled run of the watch: one value per successful launch per metric."""

    index: int
    started_at: float  # unix seconds
    values: dict[str, tuple[float, ...]]
    provenance: dict[str, Any]


def pct(x: float) -> float:
    return round(100.0 * x, 2)


def metric_of(text: str) -> Metric:
    """The catalogue's metric of ``NAME`` or ``NAME@KEY``."""
    return parse_metric(text).metric


def _estimate(metric: Metric, current: Sequence[float], base: Sequence[float]) -> Estimate | None:
    if metric.unit == COUNTS:
        return contrast([v + 1.0 for v in current], [v + 1.0 for v in base])
    return contrast(current, base)


def detectable(estimate: Estimate | None, confidence: float) -> float | None:
    """The smallest change (relative) this comparison sees at its noise: its interval's
    half-width on the ratio scale; None without a spread."""
    if estimate is None or estimate.se == 0.0:
        return None
    lo, hi = estimate.log_interval(confidence)
    half = (hi - lo) / 2.0
    return math.expm1(half) if math.isfinite(half) else None


def undecided_text(judgement: Judgement, seen: float | None) -> str:
    """What an undecided row lacks, in what the watch can see."""
    parts = []
    if judgement.change is not None:
        parts.append("no change detected")
    if seen is not None:
        parts.append(f"at this noise it sees changes of ±{100.0 * seen:.3g} % or more")
    if judgement.reason:
        parts.append(judgement.reason)
    if judgement.needed is not None:
        more = max(1, judgement.needed - judgement.launches[0])
        if judgement.change is None:
            parts.append(f"{more} more launch{'es' if more != 1 else ''} (at least 2 a side)")
        else:
            parts.append(f"{more} more launch{'es' if more != 1 else ''} would decide")
    return "; ".join(parts)


def judge_occurrence(
    current: Occurrence,
    baseline: Occurrence,
    metrics: Sequence[str],
    margin: float,
    reasons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``current`` against ``baseline``; ``margin`` is relative (0.05 for 5 %). ``change_pct``,
    ``interval`` and ``detectable_pct`` are percentages (-18.0 is 18 % lower). ``reasons``: per
    metric, why it cannot be judged whatever its interval (a baseline too noisy)."""
    refs = [metric_of(m) for m in metrics]
    cur = [current.values.get(m, ()) for m in metrics]
    base = [baseline.values.get(m, ()) for m in metrics]
    estimates = [_estimate(r, c, b) for r, c, b in zip(refs, cur, base, strict=True)]
    tested = [i for i, e in enumerate(estimates) if e is not None]
    adjusted = adjust([e.p_value() for e in estimates if e is not None], Method.BH)
    p_adj: dict[int, float] = dict(zip(tested, adjusted, strict=True))
    confidence = family_confidence(Method.BH, len(metrics), sum(p <= ALPHA for p in adjusted))
    rows = []
    for i, metric in enumerate(metrics):
        estimate = estimates[i]
        judgement = judge_pair(
            estimate,
            refs[i],
            margin=margin,
            confidence=confidence,
            launches=(len(cur[i]), len(base[i])),
            discovered=None if estimate is None else p_adj[i] <= ALPHA,
            reason=(reasons or {}).get(metric, ""),
        )
        verdict = wording(judgement.verdict, "watch")
        seen = detectable(estimate, confidence)
        row: dict[str, Any] = {
            "metric": metric,
            "change_pct": None if judgement.change is None else pct(judgement.change),
            "interval": None
            if judgement.interval is None
            else [pct(v) for v in judgement.interval],
            "p_adjusted": p_adj.get(i),
            "launches": [len(cur[i]), len(base[i])],
            "verdict": verdict,
            "detectable_pct": None if seen is None else pct(seen),
            "missing": "",
        }
        if judgement.verdict is Verdict.UNDECIDED:
            row["missing"] = undecided_text(judgement, seen)
        rows.append(row)
    return {
        "verdict": overall([r["verdict"] for r in rows]),
        "method": str(Method.BH),
        "confidence": confidence,
        "margin_pct": pct(margin),
        "metrics": rows,
    }


def overall(verdicts: Sequence[str]) -> str:
    """Regression if any metric regresses, else improvement if any improves, else no change if
    every metric is no change, else undecided."""
    if REGRESSION in verdicts:
        return REGRESSION
    if IMPROVEMENT in verdicts:
        return IMPROVEMENT
    if verdicts and all(v == NO_CHANGE for v in verdicts):
        return NO_CHANGE
    return UNDECIDED
