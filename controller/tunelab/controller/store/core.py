"""The store's transactions, written once for both engines over the statements of
statements.py: ``SqliteStore`` and ``PostgresStore`` each supply only their connection layer
(``_tx``, ``_query``), their clock (``now``) and their scheduling turn and its fence check.

Every state change is an ``UPDATE ... WHERE state IN (expected)`` in the same transaction as its
event row; a zero-row update raises StoreConflict instead of overwriting someone else's write.
Every timestamp a method writes itself comes from ``now()`` or the dialect's ``now`` in SQL: on
PostgreSQL the database's clock, so one row never mixes two controllers' clocks.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Unpack

from tunelab.controller.states import (
    AttemptState,
    ExperimentState,
    HostState,
    check_attempt,
    check_experiment,
    check_host,
    experiment_outcome,
)
from tunelab.controller.store.base import StoreConflict, StoreNotFound
from tunelab.controller.store.books import StatementBooks
from tunelab.controller.store.changes import (
    AttemptFields,
    ExperimentFields,
    HostFields,
    HostMove,
    checked,
)
from tunelab.controller.store.models import (
    AttemptChange,
    AttemptRow,
    ExperimentRow,
    FencingToken,
    HostRow,
)
from tunelab.controller.store.rows import (
    attempt_of,
    chunks,
    column_values,
    experiment_of,
    host_of,
)
from tunelab.controller.store.searches import carry_launch_evidence
from tunelab.controller.store.secrets import HostSecrets
from tunelab.controller.store.statements import (
    ATTEMPT_INSERT_COLUMNS,
    EVENT_INSERT_COLUMNS,
    LIVE_STATES,
    Statements,
)

# A host's state and the two flags it follows from change only through transition_host (CAS).
_HOST_STATE_COLUMNS = frozenset({"state", "drain", "quarantined"})


class SqlStore(StatementBooks, ABC):
    """What both engines share; not a store by itself (no connection). It is the engine
    (engine.py) its searches, Slurm and watch statements (books.py) run on."""

    sql: Statements
    secrets: HostSecrets
    where: str  # the database, as messages name it
    schema_version: int
    migrated_from: int

    # --- the engine's part -------------------------------------------------------------------

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """One write transaction (a connection with ``execute``/``executemany``)."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read."""

    @abstractmethod
    def now(self) -> float:
        """Seconds since the epoch by the database's clock."""

    @abstractmethod
    def scheduling_pass(self) -> AbstractContextManager[FencingToken | None]:
        """This controller's scheduling turn (see base.Store)."""

    @abstractmethod
    def _check_fence(self, conn: Any, fence: FencingToken) -> None:
        """In the transaction that commits a pass: raise StoreFenced if the turn is lost."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _after_import(self, conn: Any) -> None:
        """After transfer.import_lines wrote rows with their ids (an engine may need to move
        its id sequences past them)."""

    # --- migrations' Python steps ------------------------------------------------------------

    def _move_tokens_out(self, conn: Any) -> None:
        """Migration 2's step: host tokens to the secrets file before the column is dropped."""
        rows = conn.execute("SELECT name, token FROM hosts WHERE token IS NOT NULL").fetchall()
        self.secrets.set_many({r["name"]: r["token"] for r in rows})

    def _copy_failures_out(self, conn: Any) -> None:
        """Migration 5's step, after its SQL: failure reasons kept in results become columns."""
        found = []
        for row in conn.execute(self.sql.attempt_results, ()).fetchall():
            result = json.loads(row["result_json"])
            if isinstance(result, dict) and result.get("failure_reason"):
                reason, line = result["failure_reason"], result.get("failure_line", "")
                found.append((str(reason), str(line), row["id"]))
        if found:
            conn.executemany(self.sql.set_failure, found)

    def _carry_launch_evidence(self, conn: Any) -> None:
        """Migration 9's step, after its SQL: a search trial's evidence out of its details."""
        carry_launch_evidence(conn, self.searches.search_sql)

    # --- helpers -----------------------------------------------------------------------------

    def _event(
        self, conn: Any, kind: str, ref: str, src: str | None, dst: str | None, msg: str
    ) -> None:
        conn.execute(self.sql.insert_event, (kind, ref, src, dst, msg))

    def _insert_rows(
        self, conn: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Many rows as multi-row INSERTs of up to 500 rows: a statement each, never a batch
        of statements left open on the wire (a controller frozen mid-batch would keep its
        transaction, and the write lock, beyond the server's idle-in-transaction timeout)."""
        for start in range(0, len(rows), 500):
            chunk = rows[start : start + 500]
            flat = [value for row in chunk for value in row]
            conn.execute(self.sql.insert_rows(table, columns, len(chunk)), flat)

    def _one(self, sql: str, params: Sequence[Any]) -> Any:
        rows = self._query(sql, params)
        return rows[0] if rows else None

    # --- hosts -------------------------------------------------------------------------------

    def add_host(self, host: HostRow, replace: bool = False) -> HostRow:
        values = column_values(
            {
                "name": host.name,
                "address": host.address,
                "labels": host.labels,
                "metrics_url": host.metrics_url,
                "state": host.state,
                "state_reason": host.state_reason,
                "drain": host.drain,
                "added_at": host.added_at or self.now(),
            }
        )
        with self._tx() as conn:
            if replace:  # a whole new row, as a new host would get (portable: no OR REPLACE)
                conn.execute(self.sql.delete_host, (host.name,))
            elif conn.execute(self.sql.host_exists, (host.name,)).fetchall():
                raise StoreConflict(
                    f"host {host.name!r} exists; change it with: tunelab hosts set {host.name} "
                    "--label K=V (or --metrics-url URL)"
                )
            conn.execute(self.sql.insert("hosts", values), list(values.values()))
            self._event(conn, "host", host.name, None, host.state.value, f"added {host.address}")
            self.secrets.set(host.name, host.token)  # before COMMIT: a failed write keeps no row
        return self._get_host(host.name)

    def remove_host(self, name: str) -> None:
        with self._tx() as conn:
            live = conn.execute(self.sql.live_attempt_ids_on_host, (name, *LIVE_STATES)).fetchall()
            if live:
                raise StoreConflict(
                    f"host {name!r} has live attempts {[r['id'] for r in live]}; drain it first"
                )
            if conn.execute(self.sql.delete_host, (name,)).rowcount == 0:
                raise StoreNotFound(f"no host {name!r}")
            self._event(conn, "host", name, None, None, "removed")
        self.secrets.set(name, None)

    def get_host(self, name: str) -> HostRow | None:
        row = self._one(self.sql.get_host, (name,))
        return host_of(row, self.secrets) if row is not None else None

    def _get_host(self, name: str) -> HostRow:
        found = self.get_host(name)
        if found is None:
            raise StoreNotFound(f"no host {name!r}")
        return found

    def list_hosts(self) -> list[HostRow]:
        return [host_of(r, self.secrets) for r in self._query(self.sql.list_hosts)]

    def update_host(self, name: str, **fields: Unpack[HostFields]) -> None:
        """Observations (failures, GPUs, last seen): never the state or its flags."""
        if _HOST_STATE_COLUMNS & fields.keys():
            raise TypeError("a host's state, drain and quarantined change via transition_host")
        checked(fields, HostFields, "update_host")
        token_given, token = "token" in fields, fields.pop("token", None)
        if fields:
            values = column_values(fields)
            with self._tx() as conn:
                n = conn.execute(
                    self.sql.update("hosts", values, ["name"]), (*values.values(), name)
                ).rowcount
                if n == 0:
                    raise StoreNotFound(f"no host {name!r}")
        elif token_given:
            self._get_host(name)  # no token is kept for a host that is not registered
        if token_given:
            self.secrets.set(name, token)

    def transition_host(
        self, name: str, seen: HostRow, target: HostState, **fields: Unpack[HostMove]
    ) -> HostRow:
        """Compare-and-set: write ``target`` (with ``fields``) only if the row still has the
        state, drain and quarantined flags of ``seen``; StoreConflict if a write came between."""
        check_host(seen.state, target)
        checked(fields, HostMove, "transition_host")
        values = column_values({**fields, "state": target})
        with self._tx() as conn:
            row = conn.execute(
                self.sql.transition_host(values),
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
        return host_of(row, self.secrets)

    def record_event(self, kind: str, ref: str, message: str, state: str | None = None) -> None:
        """An event with no state change of its own (e.g. a fenced run cancelled)."""
        with self._tx() as conn:
            self._event(conn, kind, ref, state, state, message)

    # --- experiments -------------------------------------------------------------------------

    def insert_experiments(self, rows: Sequence[ExperimentRow], request_id: str = "") -> str:
        """Queue a submission's experiments; returns their group. With a client's
        ``request_id`` that an earlier submission already used, nothing is inserted and that
        submission's group is returned (a retry after a lost answer queues nothing twice)."""
        group = rows[0].group if rows else ""
        with self._tx() as conn:
            now = rows[0].submitted_at if rows else self.now()
            earlier = self._claim_request(conn, request_id, group, now)
            if earlier is not None:
                return earlier
            self._insert_experiment_rows(conn, rows)
        return group

    def _claim_request(self, conn: Any, request_id: str, group: str, now: float) -> str | None:
        """In a submission's transaction: the group an earlier submission with this client
        request id made (the caller then writes nothing), or None after recording ``group``
        as this id's. No id, no record: every such submission is a new one."""
        if not request_id:
            return None
        earlier = conn.execute(self.sql.submission_group, (request_id,)).fetchone()
        if earlier is not None:
            return str(earlier["grp"])
        conn.execute(self.sql.insert_submission, (request_id, group, now))
        return None

    def _insert_experiment_rows(self, conn: Any, rows: Sequence[ExperimentRow]) -> None:
        """In the caller's transaction (a search inserts its trials with them)."""
        for row in rows:
            values = column_values(
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
            conn.execute(self.sql.insert("experiments", values), list(values.values()))
            self._event(conn, "experiment", row.id, None, row.state.value, "submitted")

    def group_experiments(self, group: str) -> list[ExperimentRow]:
        """A group's experiments in submission order."""
        return [experiment_of(r) for r in self._query(self.sql.experiments_of_group, (group,))]

    def get_experiment(self, experiment_id: str) -> ExperimentRow | None:
        row = self._one(self.sql.get_experiment, (experiment_id,))
        return experiment_of(row) if row is not None else None

    def _get_experiment(self, experiment_id: str) -> ExperimentRow:
        found = self.get_experiment(experiment_id)
        if found is None:
            raise StoreNotFound(f"no experiment {experiment_id!r}")
        return found

    def get_experiments(self, experiment_ids: Sequence[str]) -> dict[str, ExperimentRow]:
        """Many experiments in one query per 500 ids (never one query per row)."""
        out: dict[str, ExperimentRow] = {}
        for chunk in chunks(list(dict.fromkeys(experiment_ids))):
            rows = self._query(self.sql.experiments_by_ids(len(chunk)), chunk)
            out.update((r["id"], experiment_of(r)) for r in rows)
        return out

    def find_experiment_by_name(self, name: str) -> ExperimentRow | None:
        """The latest experiment with this name (served by the experiments_by_name index)."""
        row = self._one(self.sql.latest_experiment_named, (name,))
        return experiment_of(row) if row is not None else None

    def list_experiments(
        self, states: Iterable[ExperimentState] = (), limit: int = 500, group: str = ""
    ) -> list[ExperimentRow]:
        wanted = [s.value for s in states]
        params = [*wanted, *([group] if group else []), limit]
        rows = self._query(self.sql.list_experiments(len(wanted), bool(group)), params)
        return [experiment_of(r) for r in reversed(rows)]

    def queued_heads(self) -> list[ExperimentRow]:
        """The first queued experiment (priority, then submission order) of every host selector."""
        keys = self._query(self.sql.queued_selectors)
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
            rows = self._query(self.sql.queued_first, (selector_key, limit))
        else:
            priority, seq = after
            rows = self._query(
                self.sql.queued_after, (selector_key, priority, priority, seq, limit)
            )
        return [experiment_of(r) for r in rows]

    def set_queue_waits(self, waits: Mapping[str, str]) -> None:
        """Why each waiting selector's queue waits, after a pass: one row per selector, written
        only where it changed; a selector not in ``waits`` waits no longer."""
        current = {r["selector_key"]: r["message"] for r in self._query(self.sql.queue_waits)}
        gone = [key for key in current if key not in waits]
        changed = [(key, why) for key, why in waits.items() if current.get(key) != why]
        if not gone and not changed:
            return
        with self._tx() as conn:
            for chunk in chunks(gone):
                conn.execute(self.sql.delete_queue_waits(len(chunk)), chunk)
            conn.executemany(self.sql.upsert_queue_wait, changed)

    def count_experiments_by_state(self) -> dict[str, int]:
        return {r["state"]: r["n"] for r in self._query(self.sql.count_experiments)}

    def request_cancel(self, experiment_id: str) -> ExperimentRow | None:
        with self._tx() as conn:
            if conn.execute(self.sql.request_cancel, (experiment_id,)).rowcount:
                self._event(conn, "experiment", experiment_id, None, None, "cancel requested")
        return self.get_experiment(experiment_id)

    def set_experiment_state(
        self,
        experiment_id: str,
        target: ExperimentState,
        expect: Iterable[ExperimentState],
        **fields: Unpack[ExperimentFields],
    ) -> ExperimentRow:
        checked(fields, ExperimentFields, "set_experiment_state")
        with self._tx() as conn:
            self._set_experiment(conn, experiment_id, target, expect, **fields)
        return self._get_experiment(experiment_id)

    def _set_experiment(
        self,
        conn: Any,
        experiment_id: str,
        target: ExperimentState,
        expect: Iterable[ExperimentState],
        **fields: Unpack[ExperimentFields],
    ) -> None:
        expected = [s.value for s in expect]
        current = conn.execute(self.sql.experiment_state, (experiment_id,)).fetchone()
        if current is None:
            raise StoreNotFound(f"no experiment {experiment_id!r}")
        if current["state"] not in expected:
            raise StoreConflict(
                f"experiment {experiment_id} is {current['state']}, expected {expected}"
            )
        check_experiment(ExperimentState(current["state"]), target)
        values = column_values({**fields, "state": target})
        conn.execute(
            self.sql.update("experiments", values, ["id", "state"]),
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
        """Commit the intent for one experiment outside the control loop (tools, tests): takes
        the scheduling turn for it. The experiment is RUNNING on ``host`` before any agent is
        called."""
        with self.scheduling_pass() as turn:
            if turn is None:
                raise StoreConflict("another controller holds the scheduling turn")
            created = self.create_attempts([(experiment_id, host, gpus)], now, turn)
        if not created:
            if self.get_host(host) is None:
                raise StoreNotFound(f"no host {host!r}")
            raise StoreConflict(f"experiment {experiment_id} is not queued")
        return created[0]

    def create_attempts(
        self, placements: Sequence[tuple[str, str, list[int]]], now: float, fence: FencingToken
    ) -> list[AttemptRow]:
        """Commit a scheduling pass's placements in one transaction (the intent log): every
        placed experiment RUNNING with an attempt in DISPATCHING, provided ``fence`` (the turn
        the pass ran in) still holds. Experiments no longer queued (cancelled meanwhile), and
        placements on a host removed since the pass read it, are skipped (left queued); once
        committed, an attempt keeps its host from being removed until it ends."""
        created: list[AttemptRow] = []
        if not placements:
            return created
        with self._tx() as conn:
            self._check_fence(conn, fence)
            names = sorted({p[1] for p in placements})
            present = {
                r["name"] for r in conn.execute(self.sql.hosts_named(len(names)), names).fetchall()
            }
            placements = [p for p in placements if p[1] in present]
            if not placements:
                return created
            ids = [p[0] for p in placements]
            claimed = {
                r["id"]
                for r in conn.execute(self.sql.claim_queued(len(ids)), (now, *ids)).fetchall()
            }
            counts = {
                r["experiment_id"]: r["n"]
                for r in conn.execute(self.sql.attempt_counts(len(ids)), ids).fetchall()
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
            rows = [  # in statements.ATTEMPT_INSERT_COLUMNS' order
                (a.id, a.experiment_id, a.number, a.host, json.dumps(a.gpus), a.state.value, now)
                for a in created
            ]
            self._insert_rows(conn, "attempts", ATTEMPT_INSERT_COLUMNS, rows)
            self._insert_rows(conn, "events", EVENT_INSERT_COLUMNS, events)
        return created

    def get_attempt(self, attempt_id: str) -> AttemptRow | None:
        row = self._one(self.sql.get_attempt, (attempt_id,))
        return attempt_of(row) if row is not None else None

    def _get_attempt(self, attempt_id: str) -> AttemptRow:
        found = self.get_attempt(attempt_id)
        if found is None:
            raise StoreNotFound(f"no attempt {attempt_id!r}")
        return found

    def attempts_for(self, experiment_id: str) -> list[AttemptRow]:
        return [attempt_of(r) for r in self._query(self.sql.attempts_for, (experiment_id,))]

    def attempts_for_many(self, experiment_ids: Sequence[str]) -> dict[str, list[AttemptRow]]:
        """Every attempt of many experiments, in number order, one query per 500 ids."""
        out: dict[str, list[AttemptRow]] = {i: [] for i in experiment_ids}
        for chunk in chunks(list(out)):
            for r in self._query(self.sql.attempts_of_experiments(len(chunk)), chunk):
                out[r["experiment_id"]].append(attempt_of(r))
        return out

    def live_attempts(self, host: str | None = None) -> list[AttemptRow]:
        if host is None:
            rows = self._query(self.sql.live_attempts, LIVE_STATES)
        else:
            rows = self._query(self.sql.live_attempts_on_host, (host, *LIVE_STATES))
        return [attempt_of(r) for r in rows]

    def _set_attempt(
        self,
        conn: Any,
        attempt_id: str,
        target: AttemptState,
        expect: Iterable[AttemptState],
        **fields: Unpack[AttemptFields],
    ) -> str:
        expected = [s.value for s in expect]
        current = conn.execute(self.sql.attempt_state, (attempt_id,)).fetchone()
        if current is None:
            raise StoreNotFound(f"no attempt {attempt_id!r}")
        if current["state"] not in expected:
            raise StoreConflict(f"attempt {attempt_id} is {current['state']}, expected {expected}")
        check_attempt(AttemptState(current["state"]), target)
        values = column_values({**fields, "state": target})
        conn.execute(
            self.sql.update("attempts", values, ["id", "state"]),
            (*values.values(), attempt_id, current["state"]),
        )
        self._event(
            conn, "attempt", attempt_id, current["state"], target.value, fields.get("message", "")
        )
        return str(current["state"])

    def transition_attempt(
        self,
        attempt_id: str,
        target: AttemptState,
        expect: Iterable[AttemptState],
        **fields: Unpack[AttemptFields],
    ) -> AttemptRow:
        checked(fields, AttemptFields, "transition_attempt")
        with self._tx() as conn:
            self._set_attempt(conn, attempt_id, target, expect, **fields)
        return self._get_attempt(attempt_id)

    def update_attempt(self, attempt_id: str, **fields: Unpack[AttemptFields]) -> None:
        values = column_values(checked(fields, AttemptFields, "update_attempt"))
        with self._tx() as conn:
            conn.execute(
                self.sql.update("attempts", values, ["id"]), (*values.values(), attempt_id)
            )

    def change_attempts(self, changes: Sequence[AttemptChange]) -> set[str]:
        """Many attempts' updates and moves in one transaction (a wave of StartRun answers:
        one commit, not two per answer). A move whose attempt is no longer in ``expect`` is
        skipped, its columns still set; returns the ids that moved."""
        moved: set[str] = set()
        if not changes:
            return moved
        for change in changes:
            checked(change.fields, AttemptFields, "change_attempts")
        with self._tx() as conn:
            for change in changes:
                if change.fields:
                    values = column_values(change.fields)
                    conn.execute(
                        self.sql.update("attempts", values, ["id"]),
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
                except (StoreConflict, StoreNotFound):
                    continue  # moved (or removed) meanwhile: the next look settles it
                moved.add(change.attempt_id)
        return moved

    def finish_attempt(
        self,
        attempt_id: str,
        target: AttemptState,
        expect: Iterable[AttemptState],
        **fields: Unpack[AttemptFields],
    ) -> tuple[AttemptRow, ExperimentRow]:
        """End an attempt and settle its experiment in one transaction: done, failed, cancelled,
        or (LOST, retries left, not cancelled) queued again with the lost host avoided."""
        checked(fields, AttemptFields, "finish_attempt")
        now = self.now()
        with self._tx() as conn:
            fields["finished_at"] = now
            self._set_attempt(conn, attempt_id, target, expect, **fields)
            attempt = conn.execute(self.sql.get_attempt, (attempt_id,)).fetchone()
            exp = conn.execute(self.sql.experiment_row, (attempt["experiment_id"],)).fetchone()
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
        done = self._get_attempt(attempt_id)
        return done, self._get_experiment(done.experiment_id)

    def recent_results(self, limit: int, since: float) -> list[tuple[ExperimentRow, AttemptRow]]:
        attempts = [attempt_of(r) for r in self._query(self.sql.recent_results, (since, limit))]
        experiments = self.get_experiments([a.experiment_id for a in attempts])
        return [
            (experiments[a.experiment_id], a) for a in attempts if a.experiment_id in experiments
        ]

    def count_attempts_by_state(self) -> dict[str, int]:
        return {r["state"]: r["n"] for r in self._query(self.sql.count_attempts)}

    def events_for(self, ref: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self._query(self.sql.events_for, (ref, f"{ref}-a%"))]
