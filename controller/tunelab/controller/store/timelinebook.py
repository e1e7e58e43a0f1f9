"""The store's timeline statements (migration 11): one bounded timeline per attempt, with the
events read from it. Held by ``core.SqlStore`` as its other books are (books.py), built once per
dialect, run on the store's engine (engine.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from tunelab.controller.store.dialect import Dialect
from tunelab.controller.store.engine import Engine


class TimelineStore(Protocol):
    """What the timeline path needs of the store, beside :class:`Store`."""

    def put_timeline(
        self, attempt_id: str, timeline: dict[str, Any], events: list[dict[str, Any]], now: float
    ) -> int: ...
    def timeline(self, attempt_id: str) -> dict[str, Any] | None: ...
    def timeline_events(self, attempt_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]: ...


class TimelineSql:
    def __init__(self, dialect: Dialect) -> None:
        p = dialect.mark
        self.delete = f"DELETE FROM attempt_timelines WHERE attempt_id = {p}"
        self.insert = (
            "INSERT INTO attempt_timelines "
            "(attempt_id, timeline_json, events_json, bytes, stored_at) "
            f"VALUES ({dialect.marks(5)})"
        )
        self.one = f"SELECT timeline_json FROM attempt_timelines WHERE attempt_id = {p}"
        self.events = "SELECT attempt_id, events_json FROM attempt_timelines WHERE attempt_id IN "
        self.mark = p


class TimelineStatements:
    def __init__(self, engine: Engine, sql: TimelineSql) -> None:
        self._engine = engine
        self.timeline_sql = sql

    def put_timeline(
        self, attempt_id: str, timeline: dict[str, Any], events: list[dict[str, Any]], now: float
    ) -> int:
        """Store (or replace: a re-reported result) the attempt's timeline; its size in bytes."""
        text = json.dumps(timeline, separators=(",", ":"))
        with self._engine._tx() as conn:
            conn.execute(self.timeline_sql.delete, (attempt_id,))
            conn.execute(
                self.timeline_sql.insert,
                (attempt_id, text, json.dumps(events), len(text.encode()), now),
            )
        return len(text.encode())

    def timeline(self, attempt_id: str) -> dict[str, Any] | None:
        rows = self._engine._query(self.timeline_sql.one, (attempt_id,))
        return json.loads(rows[0]["timeline_json"]) if rows else None

    def timeline_events(self, attempt_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Each attempt's stored events (attempts without a timeline are absent)."""
        out: dict[str, list[dict[str, Any]]] = {}
        ids = list(dict.fromkeys(attempt_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join([self.timeline_sql.mark] * len(chunk))
            for row in self._engine._query(f"{self.timeline_sql.events}({marks})", chunk):
                out[row["attempt_id"]] = json.loads(row["events_json"])
        return out
