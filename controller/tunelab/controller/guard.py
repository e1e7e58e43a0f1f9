"""One guard for every per-object step of a control-loop tick (issue 45.1): a watch's, a
search's, a Slurm pool's. A step that raises marks its object (the store's step faults: how many
steps in a row failed and the last error's one line, shown by ``watch show``, ``search show``
and ``hosts``), logs one bounded line with that counter and is tried again after a back-off
(2 s, doubling to 5 minutes); it never fails the tick, so the scheduling pass and every other
object's step go on. A step that succeeds again clears the mark.

What stays the tick's: ``StoreFenced`` (the turn is lost: nothing more of this tick may be
written) and ``StoreUnavailable``/``StoreFull`` (the database is away: the loop says so once and
retries). Everything else, a bug included, is the object's.

Per-tick work is bounded too: at most ``max_steps`` objects per tick and kind, taken round-robin
from where the last tick stopped, so a thousand watches cost a thousand steps spread over ticks,
not one tick of all of them (and none is starved).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import structlog

from tunelab.controller.store.base import StoreFenced, StoreFull, StoreUnavailable
from tunelab.controller.store.faults import FaultBook

log = structlog.get_logger(__name__)
T = TypeVar("T")
FIRST_DELAY = 2.0
MAX_DELAY = 300.0
MAX_STEPS = 64  # objects of one kind stepped per tick
ERROR_CHARS = 300  # the stored and logged error line
TICK_ERRORS = (StoreFenced, StoreUnavailable, StoreFull)


@dataclass
class _Failing:
    failures: int
    retry_at: float


class StepBackoff:
    """Per object: how many steps in a row failed, and when to try the next."""

    def __init__(self, first: float = FIRST_DELAY, most: float = MAX_DELAY) -> None:
        self._first = first
        self._most = most
        self._failing: dict[str, _Failing] = {}

    def due(self, name: str, now: float) -> bool:
        failing = self._failing.get(name)
        return failing is None or now >= failing.retry_at

    def failing(self, name: str) -> bool:
        return name in self._failing

    def failed(self, name: str, now: float) -> tuple[int, float]:
        """Note a failed step; returns the failures in a row and the seconds until the next."""
        failures = self._failing[name].failures + 1 if name in self._failing else 1
        delay = min(self._most, self._first * 2 ** min(failures - 1, 30))
        self._failing[name] = _Failing(failures, now + delay)
        return failures, delay

    def succeeded(self, name: str) -> None:
        self._failing.pop(name, None)

    def keep_only(self, names: set[str]) -> None:
        """Forget the objects that are gone."""
        for name in [n for n in self._failing if n not in names]:
            del self._failing[name]


def error_line(exc: BaseException) -> str:
    """``Type: message (at file.py:line in function)``: one line, at most ERROR_CHARS."""
    text = " ".join("".join(c if c.isprintable() else " " for c in str(exc)[:1000]).split())
    if len(text) > 200:
        text = text[:200] + "…"
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    line = f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}"
    return line[:ERROR_CHARS]


class StepGuard:
    """The guard of one kind of object (``watch``, ``search``, ``pool``)."""

    def __init__(
        self,
        faults: FaultBook,
        kind: str,
        clock: Callable[[], float],
        max_steps: int = MAX_STEPS,
        backoff: StepBackoff | None = None,
    ) -> None:
        self._faults = faults
        self._kind = kind
        self._clock = clock
        self._max_steps = max_steps
        self._backoff = backoff or StepBackoff()
        self._cursor = ""  # the last object stepped: the next tick starts after it
        self._marked: set[str] | None = None  # objects with a fault row (read once)
        self.failed_steps = 0  # this process's failed steps of this kind, for tests and metrics

    def each(
        self,
        live: Collection[str],
        step: Callable[[str], int],
        busy: Collection[str] | None = None,
    ) -> int:
        """Step the ``busy`` objects (all ``live`` ones by default; at most ``max_steps``,
        round-robin); the sum of what they returned (trials or occurrences queued). The marks
        of objects no longer ``live`` are dropped."""
        self._backoff.keep_only(set(live))
        if self._marked is None:  # marks left by an earlier process: cleared once they pass
            self._marked = set(self._faults.step_faults(self._kind))
        for gone in self._marked - set(live):
            self._faults.clear_step_fault(self._kind, gone)
            self._marked.discard(gone)
        ordered = sorted(live if busy is None else busy)
        start = next((i for i, n in enumerate(ordered) if n > self._cursor), 0)
        total = stepped = 0
        for name in ordered[start:] + ordered[:start]:
            if stepped >= self._max_steps:
                break
            if not self._backoff.due(name, self._clock()):
                continue
            stepped += 1
            self._cursor = name
            total += self.run(name, partial(step, name), 0)
        return total

    def run(self, name: str, step: Callable[[], T], failed: T) -> T:
        """``step()``, or ``failed`` when it raised (the object is marked, the tick goes on)."""
        try:
            result = step()
        except TICK_ERRORS:
            raise
        except Exception as exc:  # the object's: marked and logged in one line, not the tick's
            self._fail(name, exc)
            return failed
        if self._backoff.failing(name) or name in (self._marked or ()):
            self._backoff.succeeded(name)
            self._faults.clear_step_fault(self._kind, name)
            if self._marked is not None:
                self._marked.discard(name)
            log.info("control_step_recovered", kind=self._kind, name=name)
        return result

    def _fail(self, name: str, exc: Exception) -> None:
        now = self._clock()
        failures, delay = self._backoff.failed(name, now)
        self.failed_steps += 1
        line = error_line(exc)
        self._faults.note_step_fault(self._kind, name, line, now)
        if self._marked is not None:
            self._marked.add(name)
        log.error(
            "control_step_failed",
            kind=self._kind,
            name=name,
            error=line,
            failures=failures,
            retry_in_s=delay,
        )
        log.debug("control_step_traceback", kind=self._kind, name=name, exc_info=exc)
