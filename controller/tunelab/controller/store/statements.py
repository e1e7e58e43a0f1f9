"""Every SQL statement of the store, written once and built for one dialect when a store opens.

``Statements(dialect)`` holds the fixed statements as attributes (their text is final: no
rewriting per call) and builds the few whose shape follows the call (an IN list of n ids, the
columns an update sets) with :meth:`in_list`, :meth:`insert` and :meth:`update`. Column and
table names in those come from the store's own code, never from a request.

To add a statement (a new table's reads and writes): add an attribute in ``__init__`` written
with ``p`` for a placeholder and ``now`` for the database's clock, and use it as
``conn.execute(self.sql.name, params)`` in the store. Both engines then run the same text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tunelab.controller.states import ATTEMPT_LIVE
from tunelab.controller.store.dialect import Dialect

LIVE_STATES = tuple(s.value for s in ATTEMPT_LIVE)
EVENT_COLUMNS = "at, kind, ref, from_state, to_state, message"
EVENT_INSERT_COLUMNS = ("at", "kind", "ref", "from_state", "to_state", "message")
ATTEMPT_INSERT_COLUMNS = (
    "id",
    "experiment_id",
    "number",
    "host",
    "gpus_json",
    "state",
    "created_at",
)


class Statements:
    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        p, now = dialect.mark, dialect.now
        live = dialect.marks(len(LIVE_STATES))

        # events
        self.insert_event = (
            f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({now}, {p}, {p}, {p}, {p}, {p})"
        )
        self.events_for = (
            f"SELECT {EVENT_COLUMNS} FROM events WHERE ref = {p} OR ref LIKE {p} ORDER BY id"
        )

        # hosts
        self.host_exists = f"SELECT 1 FROM hosts WHERE name = {p}"
        self.delete_host = f"DELETE FROM hosts WHERE name = {p}"
        self.get_host = f"SELECT * FROM hosts WHERE name = {p}"
        self.list_hosts = "SELECT * FROM hosts ORDER BY name"
        self.live_attempt_ids_on_host = (
            f"SELECT id FROM attempts WHERE host = {p} AND state IN ({live})"
        )

        # experiments (reads through experiments_shown, which adds a queue's wait)
        self.get_experiment = f"SELECT * FROM experiments_shown WHERE id = {p}"
        self.latest_experiment_named = (
            f"SELECT * FROM experiments_shown WHERE name = {p} ORDER BY seq DESC LIMIT 1"
        )
        self.queued_selectors = (
            "SELECT DISTINCT selector_key FROM experiments WHERE state = 'QUEUED'"
        )
        self.queued_first = (
            f"SELECT * FROM experiments_shown WHERE state = 'QUEUED' AND selector_key = {p} "
            f"ORDER BY priority DESC, seq LIMIT {p}"
        )
        self.queued_after = (
            f"SELECT * FROM experiments_shown WHERE state = 'QUEUED' AND selector_key = {p} "
            f"AND (priority < {p} OR (priority = {p} AND seq > {p})) "
            f"ORDER BY priority DESC, seq LIMIT {p}"
        )
        self.queue_waits = "SELECT * FROM queue_waits"
        self.upsert_queue_wait = (
            f"INSERT INTO queue_waits (selector_key, message) VALUES ({p}, {p}) "
            "ON CONFLICT (selector_key) DO UPDATE SET message = excluded.message"
        )
        self.count_experiments = "SELECT state, COUNT(*) AS n FROM experiments GROUP BY state"
        self.request_cancel = (
            f"UPDATE experiments SET cancel_requested = 1 WHERE id = {p} "
            "AND state IN ('QUEUED', 'RUNNING')"
        )
        self.experiment_state = f"SELECT state FROM experiments WHERE id = {p}"
        self.experiment_row = f"SELECT * FROM experiments WHERE id = {p}"

        # submissions (a client's request id → the group it made)
        self.submission_group = f"SELECT grp FROM submissions WHERE request_id = {p}"
        self.insert_submission = (
            f"INSERT INTO submissions (request_id, grp, submitted_at) VALUES ({p}, {p}, {p})"
        )
        self.experiments_of_group = f"SELECT * FROM experiments_shown WHERE grp = {p} ORDER BY seq"

        # attempts
        self.get_attempt = f"SELECT * FROM attempts WHERE id = {p}"
        self.attempt_state = f"SELECT state FROM attempts WHERE id = {p}"
        self.attempts_for = f"SELECT * FROM attempts WHERE experiment_id = {p} ORDER BY number"
        self.live_attempts = f"SELECT * FROM attempts WHERE state IN ({live}) ORDER BY created_at"
        self.live_attempts_on_host = (
            f"SELECT * FROM attempts WHERE host = {p} AND state IN ({live}) ORDER BY created_at"
        )
        self.recent_results = (
            f"SELECT * FROM attempts WHERE state = 'SUCCEEDED' AND finished_at >= {p} "
            f"ORDER BY finished_at DESC LIMIT {p}"
        )
        self.count_attempts = "SELECT state, COUNT(*) AS n FROM attempts GROUP BY state"
        self.attempt_results = "SELECT id, result_json FROM attempts WHERE result_json IS NOT NULL"
        self.set_failure = (
            f"UPDATE attempts SET failure_reason = {p}, failure_line = {p} WHERE id = {p}"
        )

        # the scheduling turn's epoch (checked by the pass's commit)
        self.scheduler_epoch = "SELECT value FROM meta WHERE key = 'scheduler_epoch'"

    # --- statements whose shape follows the call ---------------------------------------------

    def in_list(self, n: int) -> str:
        return self.dialect.marks(n)

    def insert(self, table: str, columns: Iterable[str]) -> str:
        names = list(columns)
        return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({self.dialect.marks(len(names))})"

    def insert_rows(self, table: str, columns: Sequence[str], n: int) -> str:
        """One ``INSERT`` of ``n`` rows (``VALUES (...), (...)``): one statement, one round
        trip, on both engines."""
        row = f"({self.dialect.marks(len(columns))})"
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * n)}"

    def update(self, table: str, columns: Iterable[str], where: Iterable[str]) -> str:
        """``UPDATE table SET c = ?, ... WHERE w = ? AND ...`` (parameters in that order)."""
        p = self.dialect.mark
        sets = ", ".join(f"{c} = {p}" for c in columns)
        conditions = " AND ".join(f"{w} = {p}" for w in where)
        return f"UPDATE {table} SET {sets} WHERE {conditions}"

    def experiments_by_ids(self, n: int) -> str:
        return f"SELECT * FROM experiments_shown WHERE id IN ({self.in_list(n)})"

    def attempts_of_experiments(self, n: int) -> str:
        return (
            f"SELECT * FROM attempts WHERE experiment_id IN ({self.in_list(n)}) "
            "ORDER BY experiment_id, number"
        )

    def list_experiments(self, states: int, by_group: bool) -> str:
        p = self.dialect.mark
        where = []
        if states:
            where.append(f"state IN ({self.in_list(states)})")
        if by_group:
            where.append(f"grp = {p}")
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        return f"SELECT * FROM experiments_shown {clause}ORDER BY seq DESC LIMIT {p}"

    def delete_queue_waits(self, n: int) -> str:
        return f"DELETE FROM queue_waits WHERE selector_key IN ({self.in_list(n)})"

    def claim_queued(self, n: int) -> str:
        """A pass's experiments to RUNNING, those still queued and not cancelled; RETURNING id."""
        p, state = self.dialect.mark, self.dialect.unindexed("state")
        return (
            f"UPDATE experiments SET state = 'RUNNING', started_at = COALESCE(started_at, {p}), "
            f"message = 'dispatching' WHERE id IN ({self.in_list(n)}) AND {state} = 'QUEUED' "
            "AND cancel_requested = 0 RETURNING id"
        )

    def hosts_named(self, n: int) -> str:
        return f"SELECT name FROM hosts WHERE name IN ({self.in_list(n)})"

    def attempt_counts(self, n: int) -> str:
        return (
            f"SELECT experiment_id, COUNT(*) AS n FROM attempts "
            f"WHERE experiment_id IN ({self.in_list(n)}) GROUP BY experiment_id"
        )

    def transition_host(self, columns: Iterable[str]) -> str:
        """Compare-and-set on a host's state and flags; RETURNING the new row."""
        p = self.dialect.mark
        sets = ", ".join(f"{c} = {p}" for c in columns)
        return (
            f"UPDATE hosts SET {sets} WHERE name = {p} AND state = {p} AND drain = {p} "
            f"AND quarantined = {p} RETURNING *"
        )
