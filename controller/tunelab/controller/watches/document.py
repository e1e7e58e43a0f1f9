"""The watch documents the controller answers with (``tunelab watch ls|show --json``,
docs/watch.md): one summary per watch, and one watch with a page of its occurrences, oldest
first (``GetWatch`` pages: a watch of 30,000 occurrences answers with the newest
``DEFAULT_PAGE`` and says how to read older ones), its per-metric ``metric_states`` and the
``change_points`` its newest judged occurrence saw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.common.redaction import Redactor
from tunelab.controller.store.models import ExperimentRow
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow

VERDICT_FIELDS = ("verdict", "baseline", "baseline_pool", "method", "confidence", "metrics",
                  "changes", "values", "launches", "launches_total", "provenance", "reason",
                  "state", "means")  # fmt: skip
DEFAULT_PAGE = 100  # occurrences GetWatch answers with when not asked for a number
MAX_PAGE = 1000  # at most, whatever is asked


def against(verdict: Mapping[str, Any]) -> str:
    """`` against #1`` or `` against #1-#3`` (a pooled baseline); "" for none."""
    pool = [int(n) for n in verdict.get("baseline_pool") or []]
    if len(pool) > 1:
        return f" against #{pool[0]}-#{pool[-1]}"
    return f" against #{verdict['baseline']}" if verdict.get("baseline") else ""


def metric_states(latest: OccurrenceRow | None) -> dict[str, dict[str, Any]]:
    """Each metric's state after the newest judged occurrence: {state, since, cause}."""
    states = (latest.verdict or {}).get("state") if latest is not None else None
    if not isinstance(states, Mapping):
        return {}
    return {
        str(m): {k: s.get(k) for k in ("state", "since", "cause")}
        for m, s in states.items()
        if isinstance(s, Mapping)
    }


def watch_state(states: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The watch's state for ``watch ls``: regression if a metric is in it, else the state
    the metrics share, else "mixed"; None before any judgement."""
    found = {str(s.get("state")) for s in states.values()}
    if not found:
        return None
    if "regression" in found:
        return "regression"
    return found.pop() if len(found) == 1 else "mixed"


def state_lines(verdict: Mapping[str, Any]) -> list[str]:
    """``output_throughput: regression since #5 (change point before #5)`` per metric in the
    regression state."""
    lines = []
    for metric, s in (verdict.get("state") or {}).items():
        if isinstance(s, Mapping) and s.get("state") == "regression":
            cause = "judged a regression" if s.get("cause") == "verdict" else s.get("cause")
            lines.append(f"{metric}: regression since #{s.get('since')} ({cause})")
    return lines


def watch_summary(
    row: WatchRow, latest: OccurrenceRow | None, judged: OccurrenceRow | None = None
) -> dict[str, Any]:
    """``latest``: the newest occurrence; ``judged``: the newest judged one (the state's)."""
    spec = row.spec
    judged = judged or (latest if latest is not None and latest.verdict else None)
    last_verdict = (judged.verdict or {}).get("verdict") if judged is not None else None
    states = metric_states(judged)
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
        "watch_state": watch_state(states),
        "metric_states": states,
        "detectable_pct": detectable(judged),
    }


def detectable(judged: OccurrenceRow | None) -> dict[str, float]:
    """Per metric, the smallest change the newest judged occurrence could see at its noise
    (percent): what ``watch add`` promises once the first occurrences exist."""
    rows = (judged.verdict or {}).get("metrics") if judged is not None else None
    return {
        str(r["metric"]): float(r["detectable_pct"])
        for r in rows or []
        if isinstance(r, Mapping) and isinstance(r.get("detectable_pct"), int | float)
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
    latest: Sequence[OccurrenceRow] = (),
    summaries: bool = False,
) -> dict[str, Any]:
    """``occurrences``: one page, oldest first; ``latest``: the watch's newest two (the
    summary's and the state's, whatever the page); ``running``: the experiments of
    occurrences not judged yet, by group. ``summaries``: each occurrence without its values
    and provenance (the report's reading, a few hundred bytes an occurrence)."""
    newest = list(latest) or list(reversed(occurrences[-2:]))
    judged = next((o for o in newest if o.verdict is not None), None)
    doc = watch_summary(row, newest[0] if newest else None, judged)
    total = newest[0].number if newest else 0
    page = [occurrence_document(o, running.get(o.group, ())) for o in occurrences]
    if summaries:
        for o in page:
            o.pop("values", None)
            o.pop("provenance", None)
    doc["occurrences"] = page
    first = occurrences[0].number if occurrences else 0
    doc["page"] = {
        "first": first,
        "last": occurrences[-1].number if occurrences else 0,
        "total": total,
        "older": first > 1,  # watch show --before FIRST reads the page before
    }
    doc["change_points"] = [
        {k: p.get(k) for k in ("occurrence", "metric", "change_pct", "p")}
        for p in ((judged.verdict or {}).get("change_points") or [] if judged else [])
        if isinstance(p, Mapping)
    ]
    return doc
