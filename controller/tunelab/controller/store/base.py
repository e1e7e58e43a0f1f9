"""The store interface, which both engines implement: ``SqliteStore`` (one file, one
controller) and ``PostgresStore`` (several controllers on one database). Their shared
statements are in ``statements.py``, written once for a ``Dialect`` (dialect.py); the
transaction logic both run is ``core.SqlStore``.

Errors::

    StoreError               the store cannot do what was asked
    ├── StoreConflict        a compare-and-set write found another state     FAILED_PRECONDITION
    │   └── StoreFenced      the scheduling turn this write was for is lost  FAILED_PRECONDITION
    ├── StoreNotFound        no such host, experiment or attempt             NOT_FOUND
    ├── StoreUnavailable     the database is read-only, deleted or replaced  UNAVAILABLE
    │                        (writes refused until a person restores it)
    └── StoreFull            the disk is full; the write was rolled back     RESOURCE_EXHAUSTED
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, Unpack

from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store.changes import AttemptFields, ExperimentFields, HostFields, HostMove
from tunelab.controller.store.faults import FaultBook
from tunelab.controller.store.models import (
    AttemptChange,
    AttemptRow,
    ExperimentRow,
    FencingToken,
    HostRow,
)
from tunelab.controller.store.noisebook import NoiseStore
from tunelab.controller.store.search_models import SearchStore
from tunelab.controller.store.timelinebook import TimelineStore
from tunelab.controller.store.watch_models import WatchStore


class StoreError(RuntimeError):
    """Base of the store's errors; the message is for a person."""


class StoreConflict(StoreError):
    """A compare-and-set write found the row in another state (or owned by another attempt)."""


class StoreFenced(StoreConflict):
    """The scheduling turn a write was made under has passed to another controller (or its
    session is gone): nothing of the write was committed."""


class StoreNotFound(StoreError):
    """No row with this key (host name, experiment id, attempt id)."""


class StoreUnavailable(StoreError):
    """The database cannot be written (read-only, deleted or replaced under us)."""


class StoreFull(StoreError):
    """The disk holding the database is full; the transaction was rolled back."""


class Store(SearchStore, WatchStore, FaultBook, TimelineStore, NoiseStore, Protocol):
    # hosts
    def add_host(self, host: HostRow, replace: bool = False) -> HostRow: ...
    def remove_host(self, name: str) -> None: ...
    def get_host(self, name: str) -> HostRow | None: ...
    def list_hosts(self) -> list[HostRow]: ...
    def update_host(self, name: str, **fields: Unpack[HostFields]) -> None: ...
    def transition_host(
        self, name: str, seen: HostRow, target: HostState, **fields: Unpack[HostMove]
    ) -> HostRow: ...

    # experiments
    def insert_experiments(self, rows: Sequence[ExperimentRow], request_id: str = "") -> str: ...
    def group_experiments(self, group: str) -> list[ExperimentRow]: ...
    def get_experiment(self, experiment_id: str) -> ExperimentRow | None: ...
    def get_experiments(self, experiment_ids: Sequence[str]) -> dict[str, ExperimentRow]: ...
    def find_experiment_by_name(self, name: str) -> ExperimentRow | None: ...
    def list_experiments(
        self, states: Iterable[ExperimentState] = (), limit: int = 500, group: str = ""
    ) -> list[ExperimentRow]: ...
    def queued_heads(self) -> list[ExperimentRow]: ...
    def next_queued(
        self, selector_key: str, after: tuple[int, int] | None
    ) -> ExperimentRow | None: ...
    def queued_after(
        self, selector_key: str, after: tuple[int, int] | None, limit: int
    ) -> list[ExperimentRow]: ...
    def set_queue_waits(self, waits: Mapping[str, str]) -> None: ...
    def count_experiments_by_state(self) -> dict[str, int]: ...
    def request_cancel(self, experiment_id: str) -> ExperimentRow | None: ...
    def set_experiment_state(
        self,
        experiment_id: str,
        target: ExperimentState,
        expect: Iterable[ExperimentState],
        **fields: Unpack[ExperimentFields],
    ) -> ExperimentRow: ...

    # attempts
    def create_attempt(
        self, experiment_id: str, host: str, gpus: list[int], now: float
    ) -> AttemptRow: ...
    def create_attempts(
        self, placements: Sequence[tuple[str, str, list[int]]], now: float, fence: FencingToken
    ) -> list[AttemptRow]: ...
    def get_attempt(self, attempt_id: str) -> AttemptRow | None: ...
    def attempts_for(self, experiment_id: str) -> list[AttemptRow]: ...
    def attempts_for_many(self, experiment_ids: Sequence[str]) -> dict[str, list[AttemptRow]]: ...
    def live_attempts(self, host: str | None = None) -> list[AttemptRow]: ...
    def transition_attempt(
        self,
        attempt_id: str,
        target: AttemptState,
        expect: Iterable[AttemptState],
        **fields: Unpack[AttemptFields],
    ) -> AttemptRow: ...
    def update_attempt(self, attempt_id: str, **fields: Unpack[AttemptFields]) -> None: ...
    def change_attempts(self, changes: Sequence[AttemptChange]) -> set[str]: ...
    def finish_attempt(
        self,
        attempt_id: str,
        target: AttemptState,
        expect: Iterable[AttemptState],
        **fields: Unpack[AttemptFields],
    ) -> tuple[AttemptRow, ExperimentRow]: ...
    def recent_results(
        self, limit: int, since: float
    ) -> list[tuple[ExperimentRow, AttemptRow]]: ...
    def count_attempts_by_state(self) -> dict[str, int]: ...

    # events
    def events_for(self, ref: str) -> list[dict[str, Any]]: ...

    # several controllers on one database
    def scheduling_pass(self) -> AbstractContextManager[FencingToken | None]:
        """This controller's scheduling turn, held across one control tick: a token for the
        writes it guards, or None while another controller (or thread) holds the turn."""
        ...

    def now(self) -> float:
        """Seconds since the epoch by the database's clock (one clock for every controller)."""
        ...

    def record_event(self, kind: str, ref: str, message: str, state: str | None = None) -> None: ...
    def close(self) -> None: ...
