"""The watches' rows and the store's part for them (migration 0008, ``0008_watches.sql``;
statements in watches.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tunelab.controller.store.models import ExperimentRow

if TYPE_CHECKING:  # base.py's Store includes this protocol
    from tunelab.controller.store.models import FencingToken

WATCH_ACTIVE = "active"
WATCH_PAUSED = "paused"
WATCH_STATES = (WATCH_ACTIVE, WATCH_PAUSED)
WATCH_MOVES = {(WATCH_ACTIVE, WATCH_PAUSED), (WATCH_PAUSED, WATCH_ACTIVE)}


@dataclass(frozen=True)
class WatchRow:
    name: str
    spec: dict[str, Any]  # WatchSpec.to_dict()
    base_yaml: str  # the experiment document each occurrence submits
    state: str  # active | paused
    next_due: float
    created_at: float
    pin: int = 0  # the pinned baseline occurrence (baseline: pinned N), else 0


@dataclass(frozen=True)
class OccurrenceRow:
    watch: str
    number: int  # 1, 2, ... in the order they were queued
    group: str  # the experiment group it queued
    due_at: float
    started_at: float
    verdict: dict[str, Any] | None = None  # written once, when its experiments all ended
    judged_at: float | None = None


class WatchStore(Protocol):
    def insert_watch(self, row: WatchRow) -> None: ...
    def get_watch(self, name: str) -> WatchRow | None: ...
    def list_watches(self) -> list[WatchRow]: ...
    def set_watch_state(self, name: str, state: str) -> WatchRow: ...
    def remove_watch(self, name: str) -> None: ...
    def watch_occurrences(
        self, name: str, after: int = 0, limit: int = 1000
    ) -> list[OccurrenceRow]: ...
    def occurrences_before(self, name: str, before: int, limit: int) -> list[OccurrenceRow]: ...
    def latest_occurrences(self, name: str, limit: int) -> list[OccurrenceRow]: ...
    def unjudged_occurrences(self) -> list[OccurrenceRow]: ...
    def start_occurrence(
        self,
        occurrence: OccurrenceRow,
        experiments: Sequence[ExperimentRow],
        next_due: float,
        fence: FencingToken,
    ) -> None: ...
    def judge_occurrence(
        self, watch: str, number: int, verdict: dict[str, Any], now: float, fence: FencingToken
    ) -> None: ...
