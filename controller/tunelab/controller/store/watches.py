"""The watches' transactions (migration 0008, ``0008_watches.sql``), held by
``core.SqlStore`` (composed, not mixed in) so both engines have them; their statements are built once per dialect in
``WatchSql`` (as ``statements.py`` and ``searches.py`` build theirs), so nothing rewrites SQL
text per call.

A watch is ``active`` or ``paused`` (``WATCH_MOVES``). An occurrence is queued in one
transaction that checks the scheduling turn's fence, moves the watch's ``next_due`` from the
value the driver read (compare-and-set) and inserts the occurrence and its experiments: a
second controller, or a second pass, queues nothing. Its verdict is written once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tunelab.controller.store.base import StoreConflict, StoreNotFound
from tunelab.controller.store.dialect import Dialect
from tunelab.controller.store.engine import Engine
from tunelab.controller.store.models import ExperimentRow, FencingToken
from tunelab.controller.store.watch_models import WATCH_MOVES, OccurrenceRow, WatchRow

OCCURRENCE_COLUMNS = "watch, number, grp, due_at, started_at, verdict_json, judged_at"
PAGE_LIMIT = 1000  # occurrences one read returns at most
MAX_WATCHES = 200  # watches one controller runs (issue 45: 300 at every 2s took 62 % CPU)


class WatchSql:
    """The watches' statements for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        p = dialect.mark
        self.insert_watch = (
            "INSERT INTO watches (name, spec_json, base_yaml, state, pin, next_due, created_at) "
            f"VALUES ({dialect.marks(7)})"
        )
        self.watch_exists = f"SELECT 1 FROM watches WHERE name = {p}"
        self.get_watch = f"SELECT * FROM watches WHERE name = {p}"
        self.list_watches = "SELECT * FROM watches ORDER BY name"
        self.watch_state = f"SELECT state FROM watches WHERE name = {p}"
        self.set_state = f"UPDATE watches SET state = {p} WHERE name = {p} AND state = {p}"
        self.delete_watch = f"DELETE FROM watches WHERE name = {p}"
        self.delete_occurrences = f"DELETE FROM watch_occurrences WHERE watch = {p}"
        self.count_watches = "SELECT COUNT(*) AS n FROM watches"
        self.occurrences = (
            f"SELECT {OCCURRENCE_COLUMNS} FROM watch_occurrences WHERE watch = {p} "
            f"AND number > {p} ORDER BY number LIMIT {p}"
        )
        self.before = (
            f"SELECT {OCCURRENCE_COLUMNS} FROM watch_occurrences WHERE watch = {p} "
            f"AND number < {p} ORDER BY number DESC LIMIT {p}"
        )
        self.latest = (
            f"SELECT {OCCURRENCE_COLUMNS} FROM watch_occurrences WHERE watch = {p} "
            f"ORDER BY number DESC LIMIT {p}"
        )
        self.unjudged = (
            f"SELECT {OCCURRENCE_COLUMNS} FROM watch_occurrences WHERE judged_at IS NULL "
            "ORDER BY watch, number"
        )
        self.advance = (
            f"UPDATE watches SET next_due = {p} WHERE name = {p} AND next_due = {p} "
            "AND state = 'active'"
        )
        self.insert_occurrence = (
            f"INSERT INTO watch_occurrences ({OCCURRENCE_COLUMNS}) VALUES ({dialect.marks(7)})"
        )
        self.judge = (
            f"UPDATE watch_occurrences SET verdict_json = {p}, judged_at = {p} "
            f"WHERE watch = {p} AND number = {p} AND judged_at IS NULL"
        )


def _watch(row: Any) -> WatchRow:
    return WatchRow(
        name=row["name"],
        spec=json.loads(row["spec_json"]),
        base_yaml=row["base_yaml"],
        state=row["state"],
        next_due=row["next_due"],
        created_at=row["created_at"],
        pin=row["pin"],
    )


def _occurrence(row: Any) -> OccurrenceRow:
    verdict = row["verdict_json"]
    return OccurrenceRow(
        watch=row["watch"],
        number=row["number"],
        group=row["grp"],
        due_at=row["due_at"],
        started_at=row["started_at"],
        verdict=json.loads(verdict) if verdict is not None else None,
        judged_at=row["judged_at"],
    )


class WatchStatements:
    """The watches' transactions, run on ``engine`` (engine.py) with its dialect's
    ``WatchSql``; ``core.SqlStore`` holds one and forwards its watch methods to it."""

    def __init__(self, engine: Engine, sql: WatchSql) -> None:
        self._engine = engine
        self.watch_sql = sql

    def insert_watch(self, row: WatchRow, cap: int = MAX_WATCHES) -> None:
        """StoreConflict when the name is taken or the controller holds ``cap`` watches (the
        count is read in the same transaction)."""
        with self._engine._tx() as conn:
            if conn.execute(self.watch_sql.watch_exists, (row.name,)).fetchall():
                raise StoreConflict(
                    f"a watch named {row.name!r} exists (tunelab watch rm {row.name} first)"
                )
            held = int(conn.execute(self.watch_sql.count_watches).fetchone()["n"])
            if held >= cap:
                raise StoreConflict(
                    f"this controller holds {held} watches, the most it runs (each one's judging "
                    "and schedule cost every tick); remove one with tunelab watch rm NAME"
                )
            conn.execute(
                self.watch_sql.insert_watch,
                (
                    row.name,
                    json.dumps(row.spec, sort_keys=True),
                    row.base_yaml,
                    row.state,
                    row.pin,
                    row.next_due,
                    row.created_at,
                ),
            )
            self._engine._event(conn, "watch", row.name, None, row.state, "added")

    def get_watch(self, name: str) -> WatchRow | None:
        rows = self._engine._query(self.watch_sql.get_watch, (name,))
        return _watch(rows[0]) if rows else None

    def list_watches(self) -> list[WatchRow]:
        return [_watch(r) for r in self._engine._query(self.watch_sql.list_watches)]

    def set_watch_state(self, name: str, state: str) -> WatchRow:
        """Pause or resume (compare-and-set on the state read in the same transaction); the
        same state again is no change."""
        with self._engine._tx() as conn:
            current = conn.execute(self.watch_sql.watch_state, (name,)).fetchone()
            if current is None:
                raise StoreNotFound(f"no watch {name!r}")
            if current["state"] != state:
                if (current["state"], state) not in WATCH_MOVES:
                    raise StoreConflict(f"watch {name} is {current['state']}; not {state}")
                conn.execute(self.watch_sql.set_state, (state, name, current["state"]))
                self._engine._event(conn, "watch", name, current["state"], state, state)
        found = self.get_watch(name)
        if found is None:
            raise StoreNotFound(f"no watch {name!r}")
        return found

    def remove_watch(self, name: str) -> None:
        """The watch and its occurrence rows; the experiments it queued stay in the queue's
        history (a queued one runs unless cancelled)."""
        with self._engine._tx() as conn:
            if conn.execute(self.watch_sql.delete_watch, (name,)).rowcount == 0:
                raise StoreNotFound(f"no watch {name!r}")
            conn.execute(self.watch_sql.delete_occurrences, (name,))
            self._engine._event(conn, "watch", name, None, None, "removed")

    def watch_occurrences(
        self, name: str, after: int = 0, limit: int = PAGE_LIMIT
    ) -> list[OccurrenceRow]:
        """At most ``limit`` occurrences numbered above ``after``, oldest first (a page: the
        history grows by one an occurrence, so nothing reads it whole)."""
        rows = self._engine._query(
            self.watch_sql.occurrences, (name, after, min(limit, PAGE_LIMIT))
        )
        return [_occurrence(r) for r in rows]

    def occurrences_before(self, name: str, before: int, limit: int) -> list[OccurrenceRow]:
        """The newest ``limit`` occurrences numbered below ``before``, oldest first."""
        query = self.watch_sql.before
        rows = self._engine._query(query, (name, before, min(limit, PAGE_LIMIT)))
        return [_occurrence(r) for r in reversed(rows)]

    def latest_occurrences(self, name: str, limit: int) -> list[OccurrenceRow]:
        """The newest ``limit``, newest first."""
        return [_occurrence(r) for r in self._engine._query(self.watch_sql.latest, (name, limit))]

    def unjudged_occurrences(self) -> list[OccurrenceRow]:
        return [_occurrence(r) for r in self._engine._query(self.watch_sql.unjudged)]

    def start_occurrence(
        self,
        occurrence: OccurrenceRow,
        experiments: Sequence[ExperimentRow],
        next_due: float,
        fence: FencingToken,
    ) -> None:
        """Queue one occurrence: its experiments and its row, and the watch's next_due moved
        from ``occurrence.due_at`` to ``next_due``, in one transaction under ``fence``.
        StoreFenced if the turn is lost, StoreConflict if next_due moved meanwhile (another
        pass queued it) or the watch was paused or removed: nothing is written then."""
        with self._engine._tx() as conn:
            self._engine._check_fence(conn, fence)
            moved = conn.execute(
                self.watch_sql.advance, (next_due, occurrence.watch, occurrence.due_at)
            ).rowcount
            if moved != 1:
                raise StoreConflict(
                    f"watch {occurrence.watch}: occurrence due at {occurrence.due_at} was queued, "
                    "paused or removed meanwhile"
                )
            self._engine._insert_experiment_rows(conn, experiments)
            conn.execute(
                self.watch_sql.insert_occurrence,
                (
                    occurrence.watch,
                    occurrence.number,
                    occurrence.group,
                    occurrence.due_at,
                    occurrence.started_at,
                    None,
                    None,
                ),
            )
            self._engine._event(
                conn,
                "watch",
                occurrence.watch,
                None,
                None,
                f"occurrence {occurrence.number} queued as {occurrence.group}",
            )

    def judge_occurrence(
        self, watch: str, number: int, verdict: dict[str, Any], now: float, fence: FencingToken
    ) -> None:
        """An occurrence's verdict, written once (StoreConflict if it already has one)."""
        with self._engine._tx() as conn:
            self._engine._check_fence(conn, fence)
            n = conn.execute(
                self.watch_sql.judge,
                (json.dumps(verdict, sort_keys=True), now, watch, number),
            ).rowcount
            if n != 1:
                raise StoreConflict(f"watch {watch} occurrence {number} is judged already")
            self._engine._event(
                conn,
                "watch",
                watch,
                None,
                None,
                f"occurrence {number}: {verdict.get('verdict', '')}",
            )
