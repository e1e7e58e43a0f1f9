"""An occurrence's figures: one value per launch for each of the watch's metrics, read from the
launch's successful attempt (``NAME`` from the sweep's first point, ``NAME@KEY`` from the point
keyed KEY, a run-level figure from the run), and the provenance it ran with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.intervals import measured
from tunelab.analysis.metrics import parse_metric
from tunelab.controller.states import AttemptState
from tunelab.controller.store.models import AttemptRow, ExperimentRow


def _point_key(point: Mapping[str, Any]) -> str:
    if point.get("concurrency"):
        return f"c{point['concurrency']}"
    rate = point.get("request_rate")
    return f"r{rate}" if rate not in (None, "inf") else f"p{point.get('point_index', 0)}"


def metric_value(result: Mapping[str, Any], metric: str) -> float | None:
    """``NAME`` from the sweep's first point, or ``NAME@KEY`` from the point keyed KEY (c8:
    concurrency 8, r4.0: rate 4, p2: the third point)."""
    ref = parse_metric(metric)
    points = [p for p in result.get("points") or [] if isinstance(p, Mapping)]
    if ref.metric.scope == "run" and not ref.point:
        value = result.get(ref.metric.field)
    elif not points:
        return None
    else:
        key = ref.point
        chosen = next((p for p in points if _point_key(p) == key), None) if key else points[0]
        value = chosen.get(ref.metric.field) if chosen is not None else None
    return measured(value)  # finite and in range, or None: 10**200 never reaches a statistic


def figures(
    experiments: Sequence[ExperimentRow],
    attempts: Mapping[str, Sequence[AttemptRow]],
    metrics: Sequence[str],
) -> tuple[dict[str, list[float]], dict[str, Any], int]:
    """(values per metric, provenance, successful launches) of one occurrence's experiments."""
    values: dict[str, list[float]] = {m: [] for m in metrics}
    provenance: dict[str, Any] = {}
    launches = 0
    for experiment in sorted(experiments, key=lambda e: e.repeat_index):
        done = [a for a in attempts.get(experiment.id, []) if a.state is AttemptState.SUCCEEDED]
        if not done or not done[-1].result:
            continue
        launches += 1
        attempt = done[-1]
        if not provenance and attempt.provenance:
            provenance = dict(attempt.provenance)
        for metric in metrics:
            value = metric_value(attempt.result or {}, metric)
            if value is not None:
                values[metric].append(value)
    return values, provenance, launches
