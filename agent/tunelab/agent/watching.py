"""One watch loop for the agent's versioned records (servers and runs): a snapshot now and after
every change, until the record is terminal or the caller goes away."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

WAKE_SECONDS = 0.5  # how often a waiting watcher checks whether its caller has gone


class _State(Protocol):
    def is_terminal(self) -> bool: ...


class _Snapshot(Protocol):
    @property
    def state(self) -> _State: ...


S = TypeVar("S", bound=_Snapshot)


class _Versioned(Protocol[S]):  # type: ignore[misc]  # S is used covariantly via snapshot()
    version: int

    def snapshot(self) -> S: ...


def watch_versioned(
    changed: threading.Condition,
    current: Callable[[], _Versioned[S]],
    cancelled: Callable[[], bool],
) -> Iterator[S]:
    """``current()`` is read under ``changed``; writers bump ``version`` and notify it."""
    seen = -1
    while not cancelled():
        with changed:
            record = current()
            if record.version == seen:
                changed.wait(WAKE_SECONDS)
                continue
            seen = record.version
            snapshot = record.snapshot()
        yield snapshot
        if snapshot.state.is_terminal():
            return
