"""The watch documents the controller answers with (``tunelab watch ls|show --json``,
docs/watch.md): one summary per watch, and one watch with its occurrences, oldest first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.common.redaction import Redactor
from tunelab.controller.store.models import ExperimentRow
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow

VERDICT_FIELDS = ("verdict", "baseline", "method", "confidence", "metrics", "changes", "values",
                  "launches", "launches_total", "provenance", "reason")  # fmt: skip


def watch_summary(row: WatchRow, newest: Sequence[OccurrenceRow]) -> dict[str, Any]:
    """``newest``: the latest occurrences, newest first (two: the one running now, if any, and
    the last judged before it)."""
    spec = row.spec
    latest = newest[0] if newest else None
    last_verdict = next((o.verdict.get("verdict") for o in newest if o.verdict), None)
    return {
        "name": row.name,
        "state": row.state,
        "every": spec["every"],
        "cron": spec["cron"] or None,
        "period_seconds": spec["period"],
        "launches": spec["launches"],
        "baseline": f"pinned {spec['pin']}" if spec["baseline"] == "pinned" else spec["baseline"],
        "metrics": list(spec["metrics"]),
        "margin_pct": 100.0 * float(spec["margin"]),
        "created_at": row.created_at,
        "next_due": row.next_due,
        "occurrences_count": latest.number if latest else 0,
        "last_occurrence_at": latest.started_at if latest else None,
        "last_verdict": last_verdict,  # the newest judged one's, also while another runs
        "running_occurrence": latest.number if latest and latest.verdict is None else None,
    }


def occurrence_document(
    o: OccurrenceRow, experiments: Sequence[ExperimentRow] = ()
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "index": o.number,
        "group": o.group,
        "due_at": o.due_at,
        "started_at": o.started_at,
        "judged_at": o.judged_at,
    }
    if o.verdict is None:
        states: dict[str, int] = {}
        for e in experiments:
            states[e.state.value] = states.get(e.state.value, 0) + 1
        doc.update(verdict=None, experiments=states)
        return doc
    verdict = {k: o.verdict.get(k) for k in VERDICT_FIELDS}
    # redacted again as shown (an occurrence judged before a shape was known, ?api_key=...)
    doc.update(Redactor.for_document(verdict).document(verdict))
    return doc


def watch_document(
    row: WatchRow,
    occurrences: Sequence[OccurrenceRow],
    running: Mapping[str, Sequence[ExperimentRow]],
) -> dict[str, Any]:
    """``running``: the experiments of occurrences not judged yet, by group."""
    doc = watch_summary(row, occurrences[::-1][:2])
    doc["occurrences"] = [occurrence_document(o, running.get(o.group, ())) for o in occurrences]
    return doc
