"""Step faults (migration 0011, ``0011_step_faults.sql``): the object a guarded control-loop
step failed for (a watch, a search, a Slurm pool), how many steps in a row failed and the last
error's one bounded line (controller/guard.py writes them). A step that succeeds again removes
its row. Not fenced: a note for the user, read by ``watch show``, ``search show`` and ``hosts``;
no state of the object depends on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tunelab.controller.store.dialect import Dialect
from tunelab.controller.store.engine import Engine

FAULT_KINDS = ("watch", "search", "pool")


@dataclass(frozen=True)
class StepFault:
    kind: str  # watch | search | pool
    name: str  # the watch's name, the search's group, the pool's host name
    failures: int  # steps in a row that failed
    error: str  # the last one's error: one line, bounded (guard.py)
    first_at: float
    last_at: float

    def shown(self) -> dict[str, Any]:
        """The ``step_error`` entry of a watch's, search's or host's document."""
        return {
            "failures": self.failures,
            "error": self.error,
            "since": self.first_at,
            "last": self.last_at,
        }


class FaultBook(Protocol):
    def note_step_fault(self, kind: str, name: str, error: str, now: float) -> StepFault: ...
    def clear_step_fault(self, kind: str, name: str) -> None: ...
    def step_faults(self, kind: str) -> dict[str, StepFault]: ...


class FaultSql:
    def __init__(self, dialect: Dialect) -> None:
        p = dialect.mark
        self.note = (
            "INSERT INTO step_faults (kind, name, failures, error, first_at, last_at) "
            f"VALUES ({p}, {p}, 1, {p}, {p}, {p}) ON CONFLICT (kind, name) DO UPDATE SET "
            "failures = step_faults.failures + 1, error = excluded.error, "
            "last_at = excluded.last_at"
        )
        self.clear = f"DELETE FROM step_faults WHERE kind = {p} AND name = {p}"
        self.one = f"SELECT * FROM step_faults WHERE kind = {p} AND name = {p}"
        self.of_kind = f"SELECT * FROM step_faults WHERE kind = {p}"


def _fault(row: Any) -> StepFault:
    return StepFault(
        row["kind"], row["name"], row["failures"], row["error"], row["first_at"], row["last_at"]
    )


class FaultStatements:
    def __init__(self, engine: Engine, sql: FaultSql) -> None:
        self._engine = engine
        self._sql = sql

    def note_step_fault(self, kind: str, name: str, error: str, now: float) -> StepFault:
        with self._engine._tx() as conn:
            conn.execute(self._sql.note, (kind, name, error, now, now))
            return _fault(conn.execute(self._sql.one, (kind, name)).fetchone())

    def clear_step_fault(self, kind: str, name: str) -> None:
        with self._engine._tx() as conn:
            conn.execute(self._sql.clear, (kind, name))

    def step_faults(self, kind: str) -> dict[str, StepFault]:
        return {r["name"]: _fault(r) for r in self._engine._query(self._sql.of_kind, (kind,))}
