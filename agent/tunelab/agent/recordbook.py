"""One record book for the agent's versioned records (servers and runs): every change to a record
goes through it — a checked state transition or an update of named fields — and it records the
event, bumps the version, writes the file and wakes watchers; it also loads a record from its file
or quarantines that file. Written once, used by ``servers/registry.py`` and ``runs/executor.py``.

The file is written outside the records' lock: a change takes a snapshot of the record (and a
sequence number) under the lock, and the thread that made it writes the snapshot once it no longer
holds the lock (the end of its outermost :meth:`RecordBook.locked`), so a slow or failing disk
never holds up a reader, a watcher or a change of another record. A snapshot older than the one
already written for its record is dropped, so a later state is never overwritten by an earlier
one. Watchers are woken once the file is written; a reader (a Get, or a watcher's periodic look)
may see a change a moment before its file holds it, and a crash in that moment leaves the file one
change behind, as a crash just before the write always could.

Changes are typed: each record type has a ``TypedDict`` of its changeable fields
(``ServerChanges``, ``RunChanges``) and its owner's ``transition``/``update`` take
``**changes: Unpack[...]``, so a misspelt field (``exitcode=3``) fails type checking. At run time
the book applies changes with :func:`dataclasses.replace`, which refuses an unknown field with
TypeError before anything changed, so a misspelt field can never be kept in memory and silently
left out of the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import structlog

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.quarantine import QuarantineList
from tunelab.agent.statefile import quarantine, read_json
from tunelab.agent.statewriter import DurableWriter

log = structlog.get_logger(__name__)

S = TypeVar("S")  # the record type's state enum
E = TypeVar("E")  # its event type


class BookRecord(Protocol[S, E]):
    """What the book needs of a record: a dataclass with these fields."""

    state: S
    message: str
    events: list[E]
    version: int  # bumped on every change; watchers wait on it (not persisted)

    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=BookRecord[Any, Any])


class RecordBook(Generic[R, S, E]):
    def __init__(
        self,
        *,
        kind: str,
        id_field: str,
        path_of: Callable[[str], Path],
        check: Callable[[S, S], None],
        event: Callable[[float, S, str], E],
        max_events: int,
        changed: threading.Condition,
        writer: DurableWriter,
        quarantined: QuarantineList,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._kind = kind
        self._id_field = id_field
        self._path_of = path_of
        self._check = check
        self._event = event
        self._max_events = max_events
        self.changed = changed  # the owner's condition: its lock guards the book too
        self._writer = writer
        self._quarantined = quarantined
        self._clock = clock
        self._records: dict[str, R] = {}
        self._sequence = 0  # snapshots for the file, numbered in the order they were taken
        self._held = threading.local()  # this thread's depth in locked() and the writes it owes
        self._file_lock = threading.Lock()  # one file write at a time; never taken under changed
        self._written: dict[str, int] = {}  # per record, the sequence of the file on disk

    # --- the records -------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __getitem__(self, key: str) -> R:
        """The live record (callers hold ``changed``' lock; snapshot it to hand it out)."""
        return self._records[key]

    def values(self) -> Iterator[R]:
        return iter(list(self._records.values()))

    def add(self, key: str, record: R, persist: bool = False) -> None:
        with self.locked():
            self._records[key] = record
            if persist:
                self._owe(key)

    def remove(self, key: str) -> None:
        with self.locked():
            self._records.pop(key, None)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the records' lock (``changed``' lock). The files of the records changed meanwhile
        are written when this thread's outermost ``locked()`` ends, after it let the lock go: an
        owner that changes a record together with its own state holds this, not its raw lock."""
        depth: int = getattr(self._held, "depth", 0)
        if depth == 0:
            self._held.owed = {}
        self._held.depth = depth + 1
        try:
            with self.changed:
                yield
        finally:
            self._held.depth = depth
            if depth == 0:
                owed: dict[str, tuple[int, dict[str, Any]]] = self._held.owed
                self._held.owed = {}
                self._write(owed)

    # --- changes -----------------------------------------------------------------------------

    def transition(self, key: str, target: S, message: str, changes: Mapping[str, Any]) -> R:
        """Check ``state → target``, apply ``changes``, record the event, persist, notify."""
        with self.locked():
            record = self._records[key]
            self._check(record.state, target)
            record = dataclasses.replace(record, **changes)  # type: ignore[type-var]
            record.state = target
            record.message = message
            record.events = [*record.events, self._event(self._clock(), target, message)]
            del record.events[: -self._max_events]
            self._commit(key, record, persist=True)
        log.info(f"{self._kind}_state", **{self._id_field: key}, state=str(target), detail=message)
        return record

    def update(
        self,
        key: str,
        changes: Mapping[str, Any],
        persist: bool = False,
        message: str | None = None,
    ) -> R:
        """Apply ``changes`` without a transition (progress, descendants seen, ...)."""
        with self.locked():
            record = dataclasses.replace(self._records[key], **changes)  # type: ignore[type-var]
            if message is not None:
                record.message = message
            self._commit(key, record, persist=persist)
            return record

    def _commit(self, key: str, record: R, persist: bool) -> None:
        record.version += 1
        self._records[key] = record
        if persist:
            self._owe(key)  # watchers are woken once its file is written
        else:
            self.changed.notify_all()

    def _owe(self, key: str) -> None:
        """Under the lock (inside :meth:`locked`): snapshot the record for its file."""
        self._sequence += 1
        self._held.owed[key] = (self._sequence, self._records[key].to_dict())

    def _write(self, owed: Mapping[str, tuple[int, dict[str, Any]]]) -> None:
        """Outside the lock: write each snapshot unless a later one of its record is on disk
        already; on a disk error the writer keeps it and retries. Then wake the watchers."""
        for key, (sequence, document) in owed.items():
            path = self._path_of(key)
            with self._file_lock:
                if sequence <= self._written.get(key, 0):
                    continue  # another thread wrote a later state of this record meanwhile
                self._written[key] = sequence
                self._writer.write(path, document)
        if owed:
            with self.changed:
                self.changed.notify_all()

    # --- loading -----------------------------------------------------------------------------

    def load(self, path: Path, parse: Callable[[Any], R], key_of: Callable[[R], str]) -> R | None:
        """The record in ``path`` (whose folder is its key), or None after quarantining a file
        that is not one we wrote (empty, truncated, garbage, wrong types, another id, a spec
        of a shape the agent never accepts)."""
        try:
            record = parse(read_json(path))
            if key_of(record) != path.parent.name:
                raise ValueError(
                    f"id {key_of(record)!r} does not match its folder {path.parent.name!r}"
                )
            return record
        except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidSpec) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            kept: Path | None = None
            try:
                kept = quarantine(path, reason)
            except OSError as move_exc:
                reason += f" (could not rename it: {move_exc})"
            self._quarantined.add(path, reason, kept)
            log.error(
                f"{self._kind}_file_quarantined", path=str(path), kept=str(kept), error=reason
            )
            return None
