"""When a search step that failed unexpectedly is tried again: after 2 s, then twice as long
each time up to 5 minutes, per search, in this controller only (a restart, or another
controller taking the turn, tries at once). A step that succeeds forgets the search's failures.

Only a spec error ends a search (``SearchSpecError``: the stored search cannot be read or
names a strategy this code does not have). Anything else (a missing optional package on this
controller, a bug, a host of trouble) says nothing of the search itself: it is logged with its
traceback and tried again, since the search may go on once it is fixed or on another
controller."""

from __future__ import annotations

from dataclasses import dataclass

FIRST_DELAY = 2.0
MAX_DELAY = 300.0


class SearchSpecError(ValueError):
    """The search as stored cannot be run by any controller: it ends FAILED with this message."""


@dataclass
class _Failing:
    failures: int
    retry_at: float


class StepBackoff:
    """Per search: how many steps in a row failed, and when to try the next."""

    def __init__(self, first: float = FIRST_DELAY, most: float = MAX_DELAY) -> None:
        self._first = first
        self._most = most
        self._failing: dict[str, _Failing] = {}

    def due(self, group: str, now: float) -> bool:
        failing = self._failing.get(group)
        return failing is None or now >= failing.retry_at

    def failed(self, group: str, now: float) -> tuple[int, float]:
        """Note a failed step; returns the failures in a row and the seconds until the next."""
        failures = self._failing[group].failures + 1 if group in self._failing else 1
        delay = min(self._most, self._first * 2 ** (failures - 1))
        self._failing[group] = _Failing(failures, now + delay)
        return failures, delay

    def succeeded(self, group: str) -> None:
        self._failing.pop(group, None)

    def keep_only(self, groups: set[str]) -> None:
        """Forget the searches that no longer run."""
        for group in [g for g in self._failing if g not in groups]:
            del self._failing[group]
