"""One occurrence against the baseline: the verdict rule (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.intervals import (
    ALPHA,
    Method,
    adjust,
    contrast,
    family_confidence,
    launches_needed,
)
from tunelab.analysis.metrics import CATALOGUE

METRICS_HIGHER_BETTER: dict[str, bool] = {m.name: m.higher_is_better for m in CATALOGUE.values()}
REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED = (
    "regression",
    "improvement",
    "no change",
    "undecided",
)


@dataclass(frozen=True)
class Occurrence:
    """One scheduled run of the watch: one value per successful launch per metric."""

    index: int
    started_at: float  # unix seconds
    values: dict[str, tuple[float, ...]]
    provenance: dict[str, Any]


def pct(x: float) -> float:
    return round(100.0 * x, 2)


def judge_occurrence(
    current: Occurrence, baseline: Occurrence, metrics: Sequence[str], margin: float
) -> dict[str, Any]:
    """``current`` against ``baseline``; ``margin`` is relative (0.05 for 5 %). ``change_pct`` and
    ``interval`` are percentages (-18.0 is 18 % lower)."""
    estimates = [contrast(current.values.get(m, ()), baseline.values.get(m, ())) for m in metrics]
    tested = [i for i, e in enumerate(estimates) if e is not None]
    adjusted = adjust([e.p_value() for e in estimates if e is not None], Method.BH)
    p_adj: dict[int, float] = dict(zip(tested, adjusted, strict=True))
    discoveries = sum(p <= ALPHA for p in adjusted)
    confidence = family_confidence(Method.BH, len(metrics), discoveries)
    rows = []
    for i, metric in enumerate(metrics):
        cur, base = current.values.get(metric, ()), baseline.values.get(metric, ())
        row: dict[str, Any] = {
            "metric": metric,
            "change_pct": None,
            "interval": None,
            "p_adjusted": None,
            "launches": [len(cur), len(base)],
            "verdict": UNDECIDED,
            "missing": "",
        }
        estimate = estimates[i]
        if estimate is None:
            short = max(0, 2 - len(cur))
            row["missing"] = (
                f"{short} more launch{'es' if short != 1 else ''} (at least 2 a side)"
                if short
                else "a baseline with at least 2 launches"
            )
            rows.append(row)
            continue
        lo, hi = estimate.relative_interval(confidence)
        point = estimate.ratio - 1.0
        worse_sign = -1.0 if METRICS_HIGHER_BETTER.get(metric, True) else 1.0
        if -margin <= lo and hi <= margin:
            verdict = NO_CHANGE
        elif p_adj[i] <= ALPHA and (lo > 0 or hi < 0) and abs(point) >= margin:
            verdict = REGRESSION if point * worse_sign > 0 else IMPROVEMENT
        else:
            verdict = UNDECIDED
        if verdict == UNDECIDED:
            need = launches_needed(estimate, min(len(cur), len(base)), margin, confidence)
            if need is not None:
                more = max(1, need - len(cur))
                row["missing"] = f"{more} more launch{'es' if more != 1 else ''} would decide"
        row.update(
            change_pct=pct(point),
            interval=[pct(lo), pct(hi)],
            p_adjusted=p_adj[i],
            verdict=verdict,
        )
        rows.append(row)
    verdicts = [r["verdict"] for r in rows]
    if REGRESSION in verdicts:
        overall = REGRESSION
    elif IMPROVEMENT in verdicts:
        overall = IMPROVEMENT
    elif verdicts and all(v == NO_CHANGE for v in verdicts):
        overall = NO_CHANGE
    else:
        overall = UNDECIDED
    return {
        "verdict": overall,
        "method": str(Method.BH),
        "confidence": confidence,
        "margin_pct": pct(margin),
        "metrics": rows,
    }
