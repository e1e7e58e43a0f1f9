"""Expanded experiments to queue rows: the one way a submission becomes experiments, shared by
``SubmitExperiments`` and a watch's occurrences (so both queue exactly the same thing)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from tunelab.controller.spec.expand import ExpandedExperiment
from tunelab.controller.states import ExperimentState
from tunelab.controller.store.models import ExperimentRow, selector_key


def new_group() -> str:
    return f"g-{secrets.token_hex(8)}"


def unique_ids(prefix: str, count: int) -> list[str]:
    """``count`` distinct random 64-bit ids (an 18,000-variant matrix collided with 32 bits;
    at 64 bits a collision with the stored ones is ~1e-10 even at a million experiments)."""
    ids: dict[str, None] = {}
    while len(ids) < count:
        ids[f"{prefix}{secrets.token_hex(8)}"] = None
    return list(ids)


def experiment_rows(
    expanded: Sequence[ExpandedExperiment], group: str, now: float
) -> list[ExperimentRow]:
    """One QUEUED row per expanded experiment, all of ``group``."""
    ids = unique_ids("x-", len(expanded))
    return [
        ExperimentRow(
            id=ids[i],
            group=group,
            name=e.name,
            state=ExperimentState.QUEUED,
            spec=e.spec,
            priority=e.priority,
            varied=e.varied,
            selector_key=selector_key(e.host),
            gpus_needed=int(e.host.get("gpus") or 0),
            repeat_index=e.repeat_index,
            max_attempts=e.max_attempts,
            submitted_at=now,
        )
        for i, e in enumerate(expanded)
    ]
