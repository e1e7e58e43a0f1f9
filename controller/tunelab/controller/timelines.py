"""An attempt's timeline, taken out of the result the agent sent and kept beside it: the result
row stays small (listings and compare read it often), the timeline and the events read from it
go to the store's timeline book (migration 11). A timeline that does not parse is dropped with
a warning in the result; it never fails the attempt."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from tunelab.analysis.timeline.differences import compare_differences
from tunelab.analysis.timeline.events import find_events
from tunelab.analysis.timeline.model import TimelineError, parse
from tunelab.bench.timeline.document import is_timeline
from tunelab.controller.store.models import AttemptRow
from tunelab.controller.store.timelinebook import TimelineStore
from tunelab.v1 import controller_pb2

log = structlog.get_logger(__name__)


def keep_timeline(
    store: TimelineStore, attempt_id: str, result: dict[str, Any] | None, now: float
) -> dict[str, Any] | None:
    """The result without its timeline, which is stored (with its events) first."""
    if not isinstance(result, dict) or not is_timeline(result.get("timeline")):
        return result  # none, or an external tool's own "timeline" key: its result as it is
    rest = {k: v for k, v in result.items() if k != "timeline"}
    document = result["timeline"]
    try:
        events = [e.to_dict() for e in find_events(parse(document))]
    except (TimelineError, KeyError, TypeError, ValueError) as exc:
        log.warning("timeline_dropped", attempt=attempt_id, error=str(exc))
        rest["warnings"] = [*rest.get("warnings", []), f"timeline not kept: {exc}"]
        return rest
    size = store.put_timeline(attempt_id, document, events, now)
    rest["timeline_bytes"] = size
    return rest


def with_timelines(store: TimelineStore, pb: controller_pb2.Experiment, documents: bool) -> None:
    """Each attempt's stored events (and, when ``documents``, its whole timeline) on ``pb``."""
    events = store.timeline_events([a.id for a in pb.attempts])
    for attempt in pb.attempts:
        if attempt.id in events:
            attempt.timeline_events_json = json.dumps(events[attempt.id])
            if documents:
                attempt.timeline_json = json.dumps(store.timeline(attempt.id))


def timeline_differences(
    store: TimelineStore,
    document: Mapping[str, Any],
    attempts: Mapping[str, Sequence[AttemptRow]],
) -> list[str]:
    """``compare``'s sentences on events one configuration shows and another never does."""
    ids = [a.id for rows in attempts.values() for a in rows]
    stored = store.timeline_events(ids)
    events = {
        experiment: [stored[a.id] for a in rows if a.id in stored]
        for experiment, rows in attempts.items()
    }
    return compare_differences(document.get("experiments") or [], events)
