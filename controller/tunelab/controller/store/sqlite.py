"""SQLite implementation of the controller store (WAL, one connection, compare-and-set writes).

Every state change is an ``UPDATE ... WHERE state IN (expected)`` in the same transaction as its
event row; a zero-row update raises StoreConflict instead of overwriting someone else's write.
The schema is versioned (migrations.py); the files are 0600, host tokens live in a separate
0600 secrets file (secrets.py), and the file is watched for deletion or replacement (dbfile.py).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tunelab.controller.states import (
    ATTEMPT_LIVE,
    AttemptState,
    ExperimentState,
    HostState,
    check_attempt,
    check_experiment,
    check_host,
    experiment_outcome,
)
from tunelab.controller.store.base import StoreConflict, StoreError
from tunelab.controller.store.dbfile import FileIdentity, create_private, translate
from tunelab.controller.store.migrations import migrate
from tunelab.controller.store.models import AttemptChange, AttemptRow, ExperimentRow, HostRow
from tunelab.controller.store.secrets import HostSecrets
from tunelab.controller.store.slurmbook import SlurmStatements

_JSON_FIELDS = {
    "labels": "labels_json",
    "gpus": "gpus_json",
    "spec": "spec_json",
    "varied": "varied_json",
    "avoid_hosts": "avoid_hosts_json",
    "result": "result_json",
    "gpu_summary": "gpu_summary_json",
    "progress": "progress_json",
    "provenance": "provenance_json",
}
_RENAMES = {"group": "grp"}
_LIVE = tuple(s.value for s in ATTEMPT_LIVE)
# A host's state and the two flags it follows from change only through transition_host (CAS).
_HOST_STATE_COLUMNS = frozenset({"state", "drain", "quarantined"})


def _column_values(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _JSON_FIELDS:
            out[_JSON_FIELDS[key]] = None if value is None else json.dumps(value, sort_keys=True)
        elif isinstance(value, bool):
            out[_RENAMES.get(key, key)] = int(value)
        elif hasattr(value, "value") and isinstance(getattr(value, "value", None), str):
            out[_RENAMES.get(key, key)] = value.value
        else:
            out[_RENAMES.get(key, key)] = value
    return out


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    """Bounded IN lists (SQLite allows 32,766 parameters; smaller chunks plan better)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _loads(text: str | None, default: Any) -> Any:
    return default if text is None else json.loads(text)


def _host(row: sqlite3.Row, secrets: HostSecrets) -> HostRow:
    return HostRow(
        name=row["name"],
        address=row["address"],
        labels=_loads(row["labels_json"], {}),
        token=secrets.get(row["name"]),
        metrics_url=row["metrics_url"],
        state=HostState(row["state"]),
        state_reason=row["state_reason"],
        drain=bool(row["drain"]),
        quarantined=bool(row["quarantined"]),
        gpu_count=row["gpu_count"],
        gpus=_loads(row["gpus_json"], []),
        last_seen=row["last_seen"],
        agent_instance_id=row["agent_instance_id"],
        agent_version=row["agent_version"],
        failures=row["failures"],
        added_at=row["added_at"],
    )


def _experiment(row: sqlite3.Row) -> ExperimentRow:
    """From a row of experiments_shown, the view every experiment read goes through."""
    wait = row["queue_wait"] or ""
    return ExperimentRow(
        seq=row["seq"],
        id=row["id"],
        group=row["grp"],
        name=row["name"],
        state=ExperimentState(row["state"]),
        priority=row["priority"],
        spec=_loads(row["spec_json"], {}),
        varied=_loads(row["varied_json"], {}),
        selector_key=row["selector_key"],
        gpus_needed=row["gpus_needed"],
        repeat_index=row["repeat_index"],
        max_attempts=row["max_attempts"],
        avoid_hosts=_loads(row["avoid_hosts_json"], []),
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        message=_shown(row["message"], wait),
        cancel_requested=bool(row["cancel_requested"]),
    )


def _shown(own: str, wait: str) -> str:
    """A queued experiment's own message (a retry's), then why its selector's queue waits."""
    return f"{own}; {wait}" if own and wait else own or wait


def _attempt(row: sqlite3.Row) -> AttemptRow:
    return AttemptRow(
        id=row["id"],
        experiment_id=row["experiment_id"],
        number=row["number"],
        host=row["host"],
        gpus=_loads(row["gpus_json"], []),
        state=AttemptState(row["state"]),
        prev_state=AttemptState(row["prev_state"]) if row["prev_state"] else None,
        created_at=row["created_at"],
        dispatched_at=row["dispatched_at"],
        acked_at=row["acked_at"],
        finished_at=row["finished_at"],
        unknown_since=row["unknown_since"],
        message=row["message"],
        result=_loads(row["result_json"], None),
        gpu_summary=_loads(row["gpu_summary_json"], None),
        progress=_loads(row["progress_json"], None),
        agent_instance_id=row["agent_instance_id"],
        provenance=_loads(row["provenance_json"], None),
    )


class SqliteStore(SlurmStatements):
    def __init__(self, path: Path | str, secrets_file: Path | None = None) -> None:
        self.path = Path(path)
        self.where = str(path)  # the database, as messages name it
        memory = str(path) == ":memory:"
        self._identity: FileIdentity | None = None
        self.secrets = HostSecrets(secrets_file or (None if memory else Path(f"{path}.secrets")))
        try:
            if not memory:
                create_private(self.path)
            self._conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=30
            )
            self._conn.row_factory = sqlite3.Row
            self._lock = threading.RLock()
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA secure_delete=ON")  # freed pages hold no old values
            before, self.schema_version = migrate(self._conn, {2: self._move_tokens_out})
            self.migrated_from = before
            if before < 2 <= self.schema_version and not memory:
                self._conn.execute("VACUUM")  # no page of the old token column survives
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) or StoreError(f"{self.path}: {exc}") from None
        if not memory:
            self._identity = FileIdentity(self.path)

    def _move_tokens_out(self, conn: sqlite3.Connection) -> None:
        """Migration 2's step: host tokens to the secrets file before the column is dropped."""
        rows = conn.execute("SELECT name, token FROM hosts WHERE token IS NOT NULL").fetchall()
        self.secrets.set_many({r["name"]: r["token"] for r in rows})

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def scheduling_pass(self) -> Iterator[bool]:
        """One SQLite file has one controller: its passes are already one at a time."""
        yield True

    def now(self) -> float:
        return time.time()

    def _fence(self, conn: Any) -> None:
        """Checked in the transaction that commits a scheduling pass (PostgreSQL: the epoch)."""

    def _after_import(self, conn: Any) -> None:
        """SQLite's AUTOINCREMENT follows explicitly inserted ids by itself."""

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; refused when the file is gone, rolled back on any error."""
        with self._lock:
            if self._identity is not None:
                self._identity.check()
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                translated = translate(exc, self.path)
                if translated is None:
                    raise
                raise translated from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                translated = translate(exc, self.path)
                if translated is None:
                    raise
                raise translated from None

    @staticmethod
    def _event(
        conn: sqlite3.Connection, kind: str, ref: str, src: str | None, dst: str | None, msg: str
    ) -> None:
        conn.execute(
            "INSERT INTO events (at, kind, ref, from_state, to_state, message) VALUES (?, ?, ?, ?, ?, ?)",
            (time.time(), kind, ref, src, dst, msg),
        )

    # --- hosts -------------------------------------------------------------------------------

    def add_host(self, host: HostRow, replace: bool = False) -> HostRow:
        values = _column_values(
            {
                "name": host.name,
                "address": host.address,
                "labels": host.labels,
                "metrics_url": host.metrics_url,
                "state": host.state,
                "state_reason": host.state_reason,
                "drain": host.drain,
                "added_at": host.added_at or time.time(),
            }
        )
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._tx() as conn:
            if replace:  # a whole new row, as a new host would get (portable: no OR REPLACE)
                conn.execute("DELETE FROM hosts WHERE name = ?", (host.name,))
            elif conn.execute("SELECT 1 FROM hosts WHERE name = ?", (host.name,)).fetchall():
                raise StoreConflict(f"host {host.name!r} exists (use --replace to change it)")
            conn.execute(f"INSERT INTO hosts ({columns}) VALUES ({marks})", list(values.values()))
            self._event(conn, "host", host.name, None, host.state.value, f"added {host.address}")
            self.secrets.set(host.name, host.token)  # before COMMIT: a failed write keeps no row
        found = self.get_host(host.name)
        assert found is not None
        return found

    def remove_host(self, name: str) -> None:
        with self._tx() as conn:
            live = conn.execute(
                f"SELECT id FROM attempts WHERE host = ? AND state IN ({','.join('?' * len(_LIVE))})",
                (name, *_LIVE),
            ).fetchall()
            if live:
                raise StoreConflict(
                    f"host {name!r} has live attempts {[r['id'] for r in live]}; drain it first"
                )
            if conn.execute("DELETE FROM hosts WHERE name = ?", (name,)).rowcount == 0:
                raise KeyError(name)
            self._event(conn, "host", name, None, None, "removed")
        self.secrets.set(name, None)

    def get_host(self, name: str) -> HostRow | None:
        rows = self._query("SELECT * FROM hosts WHERE name = ?", (name,))
        return _host(rows[0], self.secrets) if rows else None

    def list_hosts(self) -> list[HostRow]:
        rows = self._query("SELECT * FROM hosts ORDER BY name")
        return [_host(r, self.secrets) for r in rows]

    def update_host(self, name: str, **fields: Any) -> None:
        """Observations (failures, GPUs, last seen): never the state or its flags."""
        if _HOST_STATE_COLUMNS & fields.keys():
            raise TypeError("a host's state, drain and quarantined change via transition_host")
        if "token" in fields:
            self.secrets.set(name, fields.pop("token"))
        if not fields:
            return
        values = _column_values(fields)
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as conn:
            n = conn.execute(
                f"UPDATE hosts SET {assignments} WHERE name = ?", (*values.values(), name)
            ).rowcount
            if n == 0:
                raise KeyError(name)

    def transition_host(
        self, name: str, seen: HostRow, target: HostState, **fields: Any
    ) -> HostRow:
        """Compare-and-set: write ``target`` (with ``fields``) only if the row still has the
        state, drain and quarantined flags of ``seen``; StoreConflict if a write came between."""
        check_host(seen.state, target)
        values = _column_values({**fields, "state": target})
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as conn:
            row = conn.execute(
                f"UPDATE hosts SET {assignments} WHERE name = ? AND state = ? AND drain = ? "
                "AND quarantined = ? RETURNING *",
                (*values.values(), name, seen.state.value, int(seen.drain), int(seen.quarantined)),
            ).fetchone()
            if row is None:
                raise StoreConflict(f"host {name!r} changed since it was read (or was removed)")
            if target is not seen.state:
                self._event(
                    conn,
                    "host",
                    name,
                    seen.state.value,
                    target.value,
                    fields.get("state_reason", ""),
                )
        return _host(row, self.secrets)

    def record_event(self, kind: str, ref: str, message: str, state: str | None = None) -> None:
        """An event with no state change of its own (e.g. a fenced run cancelled)."""
        with self._tx() as conn:
            self._event(conn, kind, ref, state, state, message)

    # --- experiments -------------------------------------------------------------------------

    def insert_experiments(self, rows: Sequence[ExperimentRow]) -> None:
        with self._tx() as conn:
            for row in rows:
                values = _column_values(
                    {
                        "id": row.id,
                        "group": row.group,
                        "name": row.name,
                        "state": row.state,
                        "priority": row.priority,
                        "spec": row.spec,
                        "varied": row.varied,
                        "selector_key": row.selector_key,
                        "gpus_needed": row.gpus_needed,
                        "repeat_index": row.repeat_index,
                        "max_attempts": row.max_attempts,
                        "submitted_at": row.submitted_at,
                    }
                )
                conn.execute(
                    f"INSERT INTO experiments ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                    list(values.values()),
                )
                self._event(conn, "experiment", row.id, None, row.state.value, "submitted")

    def get_experiment(self, experiment_id: str) -> ExperimentRow | None:
        rows = self._query("SELECT * FROM experiments_shown WHERE id = ?", (experiment_id,))
        return _experiment(rows[0]) if rows else None

    def get_experiments(self, experiment_ids: Sequence[str]) -> dict[str, ExperimentRow]:
        """Many experiments in one query per 500 ids (never one query per row)."""
        out: dict[str, ExperimentRow] = {}
        for chunk in _chunks(list(dict.fromkeys(experiment_ids))):
            rows = self._query(
                f"SELECT * FROM experiments_shown WHERE id IN ({','.join('?' * len(chunk))})", chunk
            )
            out.update((r["id"], _experiment(r)) for r in rows)
        return out

    def find_experiment_by_name(self, name: str) -> ExperimentRow | None:
        """The latest experiment with this name (served by the experiments_by_name index)."""
        rows = self._query(
            "SELECT * FROM experiments_shown WHERE name = ? ORDER BY seq DESC LIMIT 1", (name,)
        )
        return _experiment(rows[0]) if rows else None

    def list_experiments(
        self, states: Iterable[ExperimentState] = (), limit: int = 500, group: str = ""
    ) -> list[ExperimentRow]:
        wanted = [s.value for s in states]
        where, params = [], []
        if wanted:
            where.append(f"state IN ({','.join('?' * len(wanted))})")
            params.extend(wanted)
        if group:
            where.append("grp = ?")
            params.append(group)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._query(
            f"SELECT * FROM experiments_shown {clause} ORDER BY seq DESC LIMIT ?", (*params, limit)
        )
        return [_experiment(r) for r in reversed(rows)]

    def queued_heads(self) -> list[ExperimentRow]:
        """The first queued experiment (priority, then submission order) of every host selector."""
        keys = self._query("SELECT DISTINCT selector_key FROM experiments WHERE state = 'QUEUED'")
        heads = [self.next_queued(k["selector_key"], None) for k in keys]
        return [h for h in heads if h is not None]

    def next_queued(self, selector_key: str, after: tuple[int, int] | None) -> ExperimentRow | None:
        rows = self.queued_after(selector_key, after, 1)
        return rows[0] if rows else None

    def queued_after(
        self, selector_key: str, after: tuple[int, int] | None, limit: int
    ) -> list[ExperimentRow]:
        """Queued experiments of one selector in queue order (priority, then submission), after
        the (priority, seq) position given; served by the experiments_queue index."""
        if after is None:
            rows = self._query(
                "SELECT * FROM experiments_shown WHERE state = 'QUEUED' AND selector_key = ? "
                "ORDER BY priority DESC, seq LIMIT ?",
                (selector_key, limit),
            )
        else:
            priority, seq = after
            rows = self._query(
                "SELECT * FROM experiments_shown WHERE state = 'QUEUED' AND selector_key = ? "
                "AND (priority < ? OR (priority = ? AND seq > ?)) ORDER BY priority DESC, seq LIMIT ?",
                (selector_key, priority, priority, seq, limit),
            )
        return [_experiment(r) for r in rows]

    def set_queue_waits(self, waits: Mapping[str, str]) -> None:
        """Why each waiting selector's queue waits, after a pass: one row per selector, written
        only where it changed; a selector not in ``waits`` waits no longer."""
        current = {
            r["selector_key"]: r["message"] for r in self._query("SELECT * FROM queue_waits")
        }
        gone = [key for key in current if key not in waits]
        changed = [(key, why) for key, why in waits.items() if current.get(key) != why]
        if not gone and not changed:
            return
        with self._tx() as conn:
            for chunk in _chunks(gone):
                conn.execute(
                    f"DELETE FROM queue_waits WHERE selector_key IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            conn.executemany(
                "INSERT INTO queue_waits (selector_key, message) VALUES (?, ?) "
                "ON CONFLICT (selector_key) DO UPDATE SET message = excluded.message",
                changed,
            )

    def count_experiments_by_state(self) -> dict[str, int]:
        rows = self._query("SELECT state, COUNT(*) AS n FROM experiments GROUP BY state")
        return {r["state"]: r["n"] for r in rows}

    def request_cancel(self, experiment_id: str) -> ExperimentRow | None:
        with self._tx() as conn:
            n = conn.execute(
                "UPDATE experiments SET cancel_requested = 1 WHERE id = ? AND state IN ('QUEUED', 'RUNNING')",
                (experiment_id,),
            ).rowcount
            if n:
                self._event(conn, "experiment", experiment_id, None, None, "cancel requested")
        return self.get_experiment(experiment_id)

    def set_experiment_state(
        self,
        experiment_id: str,
        target: ExperimentState,
        expect: Iterable[ExperimentState],
        **fields: Any,
    ) -> ExperimentRow:
        with self._tx() as conn:
            self._set_experiment(conn, experiment_id, target, expect, **fields)
        row = self.get_experiment(experiment_id)
        assert row is not None
        return row

    def _set_experiment(
        self,
        conn: sqlite3.Connection,
        experiment_id: str,
        target: ExperimentState,
        expect: Iterable[ExperimentState],
        **fields: Any,
    ) -> None:
        expected = [s.value for s in expect]
        current = conn.execute(
            "SELECT state FROM experiments WHERE id = ?", (experiment_id,)
        ).fetchone()
        if current is None:
            raise KeyError(experiment_id)
        if current["state"] not in expected:
            raise StoreConflict(
                f"experiment {experiment_id} is {current['state']}, expected {expected}"
            )
        check_experiment(ExperimentState(current["state"]), target)
        values = _column_values({**fields, "state": target})
        assignments = ", ".join(f"{k} = ?" for k in values)
        conn.execute(
            f"UPDATE experiments SET {assignments} WHERE id = ? AND state = ?",
            (*values.values(), experiment_id, current["state"]),
        )
        self._event(
            conn,
            "experiment",
            experiment_id,
            current["state"],
            target.value,
            fields.get("message", ""),
        )

    # --- attempts ----------------------------------------------------------------------------

    def create_attempt(
        self, experiment_id: str, host: str, gpus: list[int], now: float
    ) -> AttemptRow:
        """Commit the intent: the experiment is RUNNING on ``host`` before any agent is called."""
        created = self.create_attempts([(experiment_id, host, gpus)], now)
        if not created:
            raise StoreConflict(f"experiment {experiment_id} is not queued")
        return created[0]

    def create_attempts(
        self, placements: Sequence[tuple[str, str, list[int]]], now: float
    ) -> list[AttemptRow]:
        """Commit a whole scheduling pass in one transaction (the intent log): every placed
        experiment RUNNING with an attempt in DISPATCHING. Experiments no longer queued (cancelled
        meanwhile) are skipped."""
        created: list[AttemptRow] = []
        if not placements:
            return created
        ids = [p[0] for p in placements]
        marks = ",".join("?" * len(ids))
        with self._tx() as conn:
            self._fence(conn)
            claimed = {
                r["id"]
                for r in conn.execute(
                    f"UPDATE experiments SET state = 'RUNNING', started_at = COALESCE(started_at, ?), "
                    f"message = 'dispatching' WHERE id IN ({marks}) AND state = 'QUEUED' "
                    f"AND cancel_requested = 0 RETURNING id",
                    (now, *ids),
                ).fetchall()
            }
            counts = {
                r["experiment_id"]: r["n"]
                for r in conn.execute(
                    f"SELECT experiment_id, COUNT(*) AS n FROM attempts WHERE experiment_id IN ({marks}) "
                    f"GROUP BY experiment_id",
                    ids,
                ).fetchall()
            }
            events = []
            for experiment_id, host, gpus in placements:
                if experiment_id not in claimed:
                    continue  # cancelled or taken meanwhile
                number = counts.get(experiment_id, 0) + 1
                attempt = AttemptRow(
                    f"{experiment_id}-a{number}",
                    experiment_id,
                    number,
                    host,
                    AttemptState.DISPATCHING,
                    list(gpus),
                    created_at=now,
                )
                created.append(attempt)
                events += [
                    (
                        now,
                        "experiment",
                        experiment_id,
                        "QUEUED",
                        "RUNNING",
                        f"attempt {number} on {host}",
                    ),
                    (now, "attempt", attempt.id, None, "DISPATCHING", f"on {host} gpus {gpus}"),
                ]
            conn.executemany(
                "INSERT INTO attempts (id, experiment_id, number, host, gpus_json, state, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        a.id,
                        a.experiment_id,
                        a.number,
                        a.host,
                        json.dumps(a.gpus),
                        a.state.value,
                        now,
                    )
                    for a in created
                ],
            )
            conn.executemany(
                "INSERT INTO events (at, kind, ref, from_state, to_state, message) VALUES (?, ?, ?, ?, ?, ?)",
                events,
            )
        return created

    def get_attempt(self, attempt_id: str) -> AttemptRow | None:
        rows = self._query("SELECT * FROM attempts WHERE id = ?", (attempt_id,))
        return _attempt(rows[0]) if rows else None

    def attempts_for(self, experiment_id: str) -> list[AttemptRow]:
        rows = self._query(
            "SELECT * FROM attempts WHERE experiment_id = ? ORDER BY number", (experiment_id,)
        )
        return [_attempt(r) for r in rows]

    def attempts_for_many(self, experiment_ids: Sequence[str]) -> dict[str, list[AttemptRow]]:
        """Every attempt of many experiments, in number order, one query per 500 ids."""
        out: dict[str, list[AttemptRow]] = {i: [] for i in experiment_ids}
        for chunk in _chunks(list(out)):
            rows = self._query(
                f"SELECT * FROM attempts WHERE experiment_id IN ({','.join('?' * len(chunk))}) "
                "ORDER BY experiment_id, number",
                chunk,
            )
            for r in rows:
                out[r["experiment_id"]].append(_attempt(r))
        return out

    def live_attempts(self, host: str | None = None) -> list[AttemptRow]:
        marks = ",".join("?" * len(_LIVE))
        if host is None:
            rows = self._query(
                f"SELECT * FROM attempts WHERE state IN ({marks}) ORDER BY created_at", _LIVE
            )
        else:
            rows = self._query(
                f"SELECT * FROM attempts WHERE host = ? AND state IN ({marks}) ORDER BY created_at",
                (host, *_LIVE),
            )
        return [_attempt(r) for r in rows]

    def _set_attempt(
        self,
        conn: sqlite3.Connection,
        attempt_id: str,
        target: AttemptState,
        expect: Iterable[AttemptState],
        **fields: Any,
    ) -> str:
        expected = [s.value for s in expect]
        current = conn.execute("SELECT state FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        if current is None:
            raise KeyError(attempt_id)
        if current["state"] not in expected:
            raise StoreConflict(f"attempt {attempt_id} is {current['state']}, expected {expected}")
        check_attempt(AttemptState(current["state"]), target)
        values = _column_values({**fields, "state": target})
        assignments = ", ".join(f"{k} = ?" for k in values)
        conn.execute(
            f"UPDATE attempts SET {assignments} WHERE id = ? AND state = ?",
            (*values.values(), attempt_id, current["state"]),
        )
        self._event(
            conn, "attempt", attempt_id, current["state"], target.value, fields.get("message", "")
        )
        return str(current["state"])

    def transition_attempt(
        self, attempt_id: str, target: AttemptState, expect: Iterable[AttemptState], **fields: Any
    ) -> AttemptRow:
        with self._tx() as conn:
            self._set_attempt(conn, attempt_id, target, expect, **fields)
        attempt = self.get_attempt(attempt_id)
        assert attempt is not None
        return attempt

    def update_attempt(self, attempt_id: str, **fields: Any) -> None:
        values = _column_values(fields)
        with self._tx() as conn:
            conn.execute(
                f"UPDATE attempts SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
                (*values.values(), attempt_id),
            )

    def change_attempts(self, changes: Sequence[AttemptChange]) -> set[str]:
        """Many attempts' updates and moves in one transaction (a wave of StartRun answers:
        one commit, not two per answer). A move whose attempt is no longer in ``expect`` is
        skipped, its columns still set; returns the ids that moved."""
        moved: set[str] = set()
        if not changes:
            return moved
        with self._tx() as conn:
            for change in changes:
                if change.fields:
                    values = _column_values(change.fields)
                    conn.execute(
                        f"UPDATE attempts SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
                        (*values.values(), change.attempt_id),
                    )
                if change.target is None:
                    continue
                try:
                    self._set_attempt(
                        conn,
                        change.attempt_id,
                        change.target,
                        change.expect,
                        message=change.message,
                    )
                except (StoreConflict, KeyError):
                    continue  # moved (or removed) meanwhile: the next look settles it
                moved.add(change.attempt_id)
        return moved

    def finish_attempt(
        self, attempt_id: str, target: AttemptState, expect: Iterable[AttemptState], **fields: Any
    ) -> tuple[AttemptRow, ExperimentRow]:
        """End an attempt and settle its experiment in one transaction: done, failed, cancelled,
        or (LOST, retries left, not cancelled) queued again with the lost host avoided."""
        now = time.time()
        with self._tx() as conn:
            self._set_attempt(conn, attempt_id, target, expect, finished_at=now, **fields)
            attempt = conn.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
            exp = conn.execute(
                "SELECT * FROM experiments WHERE id = ?", (attempt["experiment_id"],)
            ).fetchone()
            outcome = experiment_outcome(target)
            message = fields.get("message", "")
            if exp["state"] == ExperimentState.RUNNING.value:
                if outcome is None and exp["cancel_requested"]:
                    outcome = ExperimentState.CANCELLED
                if outcome is None and attempt["number"] >= exp["max_attempts"]:
                    outcome = ExperimentState.FAILED
                    message = f"lost {attempt['number']} times (max_attempts {exp['max_attempts']}): {message}"
                if outcome is None:
                    avoid = sorted({*json.loads(exp["avoid_hosts_json"]), attempt["host"]})
                    self._set_experiment(
                        conn,
                        exp["id"],
                        ExperimentState.QUEUED,
                        [ExperimentState.RUNNING],
                        avoid_hosts=avoid,
                        message=f"attempt {attempt['number']} lost on {attempt['host']}; queued again",
                    )
                else:
                    self._set_experiment(
                        conn,
                        exp["id"],
                        outcome,
                        [ExperimentState.RUNNING],
                        finished_at=now,
                        message=message,
                    )
        done = self.get_attempt(attempt_id)
        experiment = self.get_experiment(done.experiment_id) if done else None
        assert done is not None and experiment is not None
        return done, experiment

    def recent_results(self, limit: int, since: float) -> list[tuple[ExperimentRow, AttemptRow]]:
        rows = self._query(
            "SELECT * FROM attempts WHERE state = 'SUCCEEDED' AND finished_at >= ? "
            "ORDER BY finished_at DESC LIMIT ?",
            (since, limit),
        )
        attempts = [_attempt(r) for r in rows]
        experiments = self.get_experiments([a.experiment_id for a in attempts])
        return [
            (experiments[a.experiment_id], a) for a in attempts if a.experiment_id in experiments
        ]

    def count_attempts_by_state(self) -> dict[str, int]:
        rows = self._query("SELECT state, COUNT(*) AS n FROM attempts GROUP BY state")
        return {r["state"]: r["n"] for r in rows}

    def events_for(self, ref: str) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT at, kind, ref, from_state, to_state, message FROM events WHERE ref = ? OR ref LIKE ? ORDER BY id",
            (ref, f"{ref}-a%"),
        )
        return [dict(r) for r in rows]
