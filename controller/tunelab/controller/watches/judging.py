"""An occurrence's figures and its verdict: one value per launch for each of the watch's
metrics (read from the launch's successful attempt), the provenance it ran with, and the
judgement against its baseline occurrence (``tunelab.analysis.watch.judge_occurrence``) with
what changed beside it (``provenance_changes``).

The verdict document written once per occurrence (``watch show --json``'s ``occurrences``)::

    verdict     regression | improvement | no change | undecided | baseline
    baseline    the number of the occurrence it was judged against (None for a baseline)
    method, confidence, metrics    the judgement's (one row per metric: change_pct, interval,
                                   p_adjusted, launches, verdict, missing)
    changes     [{field, before, after}]: provenance that differs from the baseline's
    values      {metric: [one value per successful launch]}
    launches    successful launches; launches_total: launches queued
    provenance  the first successful launch's, as the agent recorded it (redacted)
    reason      why there is no judgement, when there is none
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.intervals import measured
from tunelab.analysis.watch import Occurrence, judge_occurrence, provenance_changes
from tunelab.controller.states import AttemptState
from tunelab.controller.store.models import AttemptRow, ExperimentRow
from tunelab.controller.store.watch_models import OccurrenceRow
from tunelab.controller.watches.spec import METRIC, WatchSpec

BASELINE = "baseline"


def _point_key(point: Mapping[str, Any]) -> str:
    if point.get("concurrency"):
        return f"c{point['concurrency']}"
    rate = point.get("request_rate")
    return f"r{rate}" if rate not in (None, "inf") else f"p{point.get('point_index', 0)}"


def metric_value(result: Mapping[str, Any], metric: str) -> float | None:
    """``NAME`` from the sweep's first point, or ``NAME@KEY`` from the point keyed KEY (c8:
    concurrency 8, r4.0: rate 4, p2: the third point)."""
    found = METRIC.match(metric)
    points = [p for p in result.get("points") or [] if isinstance(p, Mapping)]
    if found is None or not points:
        return None
    name, key = found.group(1), found.group(2)
    chosen = next((p for p in points if _point_key(p) == key), None) if key else points[0]
    return measured(chosen.get(name)) if chosen is not None else None


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


def _usable(o: OccurrenceRow) -> bool:
    """Judged, with successful launches: it can serve as a baseline."""
    return o.verdict is not None and int(o.verdict.get("launches", 0)) > 0


def pick_baseline(
    spec: WatchSpec, number: int, earlier: Sequence[OccurrenceRow]
) -> tuple[OccurrenceRow | None, str]:
    """(the baseline occurrence, or None with why) for occurrence ``number``; ``earlier`` are
    the watch's occurrences before it, oldest first. None with reason "" means the occurrence
    is the baseline itself."""
    usable = [o for o in earlier if _usable(o)]
    if spec.baseline == "pinned":
        if number == spec.pin:
            return None, ""
        pinned = next((o for o in earlier if o.number == spec.pin), None)
        if pinned is None or not _usable(pinned):
            return None, f"the pinned baseline (occurrence {spec.pin}) has no result yet"
        return pinned, ""
    if spec.baseline == "previous":
        return (usable[-1], "") if usable else (None, "")
    first = next((o for o in usable if (o.verdict or {}).get("verdict") == BASELINE), None)
    return (first, "") if first is not None else (None, "")


def _as_occurrence(o: OccurrenceRow) -> Occurrence:
    verdict = o.verdict or {}
    values = {str(m): tuple(float(x) for x in v) for m, v in verdict.get("values", {}).items()}
    return Occurrence(o.number, o.started_at, values, dict(verdict.get("provenance") or {}))


def judge(
    spec: WatchSpec,
    occurrence: OccurrenceRow,
    found: tuple[dict[str, list[float]], dict[str, Any], int],
    launches_total: int,
    earlier: Sequence[OccurrenceRow],
) -> dict[str, Any]:
    """The verdict document of ``occurrence`` (see the module's docstring)."""
    values, provenance, launches = found
    record: dict[str, Any] = {
        "values": values,
        "provenance": provenance,
        "launches": launches,
        "launches_total": launches_total,
        "baseline": None,
        "method": "",
        "confidence": None,
        "metrics": [],
        "changes": [],
        "reason": "",
    }
    if launches == 0:
        return {**record, "verdict": "undecided", "reason": "no launch of it succeeded"}
    baseline, why = pick_baseline(spec, occurrence.number, earlier)
    if baseline is None:
        if why:
            return {**record, "verdict": "undecided", "reason": why}
        return {**record, "verdict": BASELINE, "reason": "the baseline of later occurrences"}
    current = Occurrence(
        occurrence.number,
        occurrence.started_at,
        {m: tuple(v) for m, v in values.items()},
        provenance,
    )
    before = _as_occurrence(baseline)
    judgement = judge_occurrence(current, before, spec.metrics, spec.margin)
    return {
        **record,
        "verdict": judgement["verdict"],
        "baseline": baseline.number,
        "method": judgement.get("method", ""),
        "confidence": judgement.get("confidence"),
        "metrics": judgement.get("metrics", []),
        "changes": provenance_changes(provenance, before.provenance),
    }
