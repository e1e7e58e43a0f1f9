"""STAND-IN for branch watch-judge's module (the lead takes theirs on merge and deletes this
one): the interface watch-core calls, with a small implementation so its flow can be tested.

A metric's change is the log ratio of launch means (intervals.contrast), judged against the
margin; the family of metrics is corrected with Benjamini-Hochberg.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunelab.analysis.intervals import ALPHA, Method, adjust, contrast, family_confidence

LARGER_IS_BETTER = ("throughput", "completed")


@dataclass(frozen=True)
class Occurrence:
    index: int
    started_at: float
    values: dict[str, tuple[float, ...]]  # metric -> one value per launch
    provenance: dict[str, Any] = field(default_factory=dict)


def _better_larger(metric: str) -> bool:
    return any(word in metric for word in LARGER_IS_BETTER)


def judge_occurrence(
    current: Occurrence, baseline: Occurrence, metrics: Sequence[str], margin: float
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    estimates = []
    for metric in metrics:
        now, before = current.values.get(metric, ()), baseline.values.get(metric, ())
        estimate = contrast(now, before) if len(now) >= 2 and len(before) >= 2 else None
        estimates.append(estimate)
        rows.append(
            {
                "metric": metric,
                "change_pct": None,
                "interval": None,
                "p_adjusted": None,
                "launches": [len(now), len(before)],
                "verdict": "undecided",
                "missing": "" if estimate else "at least 2 launches on each side",
            }
        )
    judged = [i for i, e in enumerate(estimates) if e is not None]
    p_adjusted = adjust([estimates[i].p_value() for i in judged], Method.BH)  # type: ignore[union-attr]
    discoveries = sum(1 for p in p_adjusted if p <= ALPHA)
    confidence = family_confidence(Method.BH, max(len(judged), 1), discoveries)
    for i, p in zip(judged, p_adjusted, strict=True):
        estimate = estimates[i]
        assert estimate is not None
        lo, hi = estimate.relative_interval(confidence)
        change = estimate.ratio - 1.0
        row = rows[i]
        row.update(change_pct=100.0 * change, interval=[100.0 * lo, 100.0 * hi], p_adjusted=p)
        if -margin < lo and hi < margin:
            row["verdict"] = "no change"
        elif p <= ALPHA and abs(change) >= margin:
            worse = change < 0 if _better_larger(str(row["metric"])) else change > 0
            row["verdict"] = "regression" if worse else "improvement"
        elif p > ALPHA and abs(change) < margin:
            row["verdict"] = "no change"
    verdicts = [str(r["verdict"]) for r in rows]
    overall = next(
        (v for v in ("regression", "improvement", "undecided") if v in verdicts), "no change"
    )
    return {"verdict": overall, "method": "stand-in", "confidence": confidence, "metrics": rows}


def change_points(
    series: Sequence[tuple[float, float]], *, min_size: int = 3, max_false_rate: float = 0.01
) -> list[dict[str, Any]]:
    return []


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif prefix and prefix != "recorded_at":
        out[prefix] = str(value)


def provenance_changes(
    current: Mapping[str, Any], baseline: Mapping[str, Any]
) -> list[dict[str, str]]:
    now: dict[str, str] = {}
    before: dict[str, str] = {}
    _flatten("", current, now)
    _flatten("", baseline, before)
    return [
        {"field": k, "before": before.get(k, "-"), "after": now.get(k, "-")}
        for k in sorted(now.keys() | before.keys())
        if now.get(k) != before.get(k)
    ]


def verdict_line(metric_row: Mapping[str, Any], changes: Sequence[Mapping[str, str]]) -> str:
    change = metric_row.get("change_pct")
    interval = metric_row.get("interval")
    text = f"{metric_row['metric']} "
    if isinstance(change, int | float) and not math.isnan(change) and interval:
        text += f"{change:+.1f} % [{interval[0]:+.1f}, {interval[1]:+.1f}]"
    else:
        text += "-"
    text += f" ({metric_row['verdict']})"
    if changes:
        text += " — changed since the baseline: " + ", ".join(
            f"{c['field']} {c['before']} → {c['after']}" for c in changes
        )
    return text


def history_page(
    name: str,
    occurrences: Sequence[Occurrence],
    judgements: Sequence[Mapping[str, Any]],
    baseline_index: int,
    metrics: Sequence[str],
) -> str:
    rows = "".join(
        f"<tr><td>{o.index}</td><td>{html.escape(str(j.get('verdict')))}</td></tr>"
        for o, j in zip(occurrences, judgements, strict=False)
    )
    return (
        f"<!doctype html><title>{html.escape(name)}</title><h1>{html.escape(name)}</h1>"
        f"<p>baseline {baseline_index}; {html.escape(', '.join(metrics))}</p>"
        f"<table>{rows}</table>"
    )
