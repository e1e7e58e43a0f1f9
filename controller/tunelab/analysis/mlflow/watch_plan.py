"""What an MLflow export writes for a watch: one run per judged occurrence, found again by its
``tunelab.key`` tag (``watch:<name>:<occurrence>``) like every other tunelab run, so exporting
twice writes nothing new (``plan.py`` explains keys and digests).

A run's parameters are the watch, the occurrence's number, its baseline and the experiment
group it queued; its metrics, per watched metric, the mean over the occurrence's launches
(``<metric>.mean``), the change against the baseline and its interval as ratios
(``<metric>.change_ratio``, ``.change_lower_ratio``, ``.change_upper_ratio``: -0.18 is 18 %
lower) and the launches counted; its tags, the verdict (``tunelab.verdict``, and per metric
``verdict.<metric>``) and what changed in the provenance since the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean
from typing import Any

from tunelab.analysis.mlflow.plan import MAX_PARAM_VALUE, RunPlan, metric_key

WATCH_TAG = "tunelab.watch"
VERDICT_TAG = "tunelab.verdict"
CHANGES_TAG = "tunelab.changes"


def occurrence_key(watch: str, number: int) -> str:
    return f"watch:{watch}:{number}"


def _changes(verdict: Mapping[str, Any]) -> str:
    text = "; ".join(
        f"{c.get('field')}: {c.get('before')} -> {c.get('after')}"
        for c in verdict.get("changes") or []
    )
    return text[:MAX_PARAM_VALUE]


def occurrence_plan(
    watch: str,
    number: int,
    group: str,
    started_at: float,
    judged_at: float | None,
    verdict: Mapping[str, Any],
) -> RunPlan:
    """The run of one judged occurrence (``verdict``: the document ``watch show --json`` lists)."""
    baseline = verdict.get("baseline")
    params = {
        "watch": watch,
        "occurrence": str(number),
        "baseline": str(baseline) if baseline else "none",
        "group": group,
    }
    metrics: list[tuple[str, float, int]] = []
    tags = {WATCH_TAG: watch, VERDICT_TAG: str(verdict.get("verdict"))}
    for name, values in sorted((verdict.get("values") or {}).items()):
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        if numbers:
            metrics.append((metric_key(f"{name}.mean"), fmean(numbers), 0))
        metrics.append((metric_key(f"{name}.launches"), float(len(numbers)), 0))
    for row in verdict.get("metrics") or []:
        name = str(row.get("metric"))
        tags[metric_key(f"verdict.{name}")] = str(row.get("verdict"))
        change = row.get("change_pct")
        if isinstance(change, int | float):
            metrics.append((metric_key(f"{name}.change_ratio"), change / 100.0, 0))
        bounds = row.get("interval")
        if isinstance(bounds, list | tuple) and len(bounds) == 2:
            metrics.append((metric_key(f"{name}.change_lower_ratio"), bounds[0] / 100.0, 0))
            metrics.append((metric_key(f"{name}.change_upper_ratio"), bounds[1] / 100.0, 0))
    changes = _changes(verdict)
    if changes:
        tags[CHANGES_TAG] = changes
    return RunPlan(
        key=occurrence_key(watch, number),
        name=f"watch {watch} #{number}",
        parent_key=None,
        status="FINISHED",
        start_ms=int(started_at * 1000),
        end_ms=int(judged_at * 1000) if judged_at else None,
        params=params,
        metrics=metrics,
        tags=tags,
    )
