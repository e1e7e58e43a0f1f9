"""PostgreSQL engine of the controller store: several controllers on one database, over pooled
psycopg 3 connections. The statements and transactions are core.SqlStore's over statements.py
in the PostgreSQL dialect (built once, ``%s`` placeholders; no SQL text is rewritten per call);
this module is the connection layer and what only a shared database needs:

- **Writers are serialised.** Each write transaction first takes a transaction-level advisory
  lock, so the compare-and-set writes behave exactly as under SQLite's one writer; reads run in
  parallel (MVCC). A controller killed mid-transaction releases the lock with its session; one
  frozen mid-transaction (SIGSTOP, a VM paused) loses it after ``lease`` seconds, when the
  server ends the session (``idle_in_transaction_session_timeout``).
- **One scheduling turn at a time, as a lease.** ``scheduling_pass()`` holds a session advisory
  lock across one control tick, on a connection of its own that a heartbeat thread keeps busy.
  That session has ``idle_session_timeout = lease``: a controller that stops (frozen, or its
  process starved) stops its heartbeat, the server ends the session after ``lease`` seconds and
  with it the lock, and another controller takes the turn at its next tick.
- **The turn is fenced.** Taking the turn bumps the epoch in ``meta``; the token handed to the
  pass carries that epoch and the holding session's backend pid, and the pass's commit
  (``create_attempts``) checks, in its own transaction, that the epoch is unchanged and that
  this session still holds the lock. A controller that lost the turn (frozen, partitioned, its
  session ended) commits nothing of its pass and so calls no agent for it.

psycopg 3 (``psycopg[binary]``) is PostgreSQL's maintained Python driver; ``psycopg_pool`` is
its pool. Times are seconds since the epoch in DOUBLE PRECISION, as in SQLite, and every one a
store method writes is read from the database server's clock, one clock for every controller.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from tunelab.controller.store.base import StoreError, StoreFenced, StoreFull, StoreUnavailable
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.dburl import redact
from tunelab.controller.store.dialect import POSTGRESQL
from tunelab.controller.store.faults import FaultSql, FaultStatements
from tunelab.controller.store.models import FencingToken
from tunelab.controller.store.noisebook import NoiseSql, NoiseStatements
from tunelab.controller.store.schema import migrate
from tunelab.controller.store.searches import SearchSql, SearchStatements
from tunelab.controller.store.secrets import HostSecrets
from tunelab.controller.store.slurmbook import SlurmSql, SlurmStatements
from tunelab.controller.store.statements import Statements
from tunelab.controller.store.timelinebook import TimelineSql, TimelineStatements
from tunelab.controller.store.watches import WatchSql, WatchStatements

WRITE_LOCK = 0x7475_6E65_0001  # "tune" + 1: one writer at a time
SCHEDULE_LOCK = 0x7475_6E65_0002  # one scheduling turn at a time
MIGRATE_LOCK = 0x7475_6E65_0003
LEASE = 3.0  # seconds a frozen controller keeps the turn (or a transaction) before it loses it

_STATEMENTS = Statements(POSTGRESQL)
_SEARCH_SQL = SearchSql(POSTGRESQL)
_SLURM_SQL = SlurmSql(POSTGRESQL)
_TIMELINE_SQL = TimelineSql(POSTGRESQL)
_NOISE_SQL = NoiseSql(POSTGRESQL)
_WATCH_SQL = WatchSql(POSTGRESQL)
_FAULT_SQL = FaultSql(POSTGRESQL)
_BUMP_EPOCH = (
    "INSERT INTO meta (key, value) VALUES ('scheduler_epoch', '1') ON CONFLICT (key) "
    "DO UPDATE SET value = (meta.value::bigint + 1)::text RETURNING value"
)
# a bigint advisory key shows in pg_locks as (classid, objid) = (high, low) 32 bits, objsubid 1
_TURN_HELD = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
    "AND objid = %s AND objsubid = 1 AND granted AND pid = %s) AS held"
)


class _PgConnection:
    """What the shared statements need of a connection: ``execute`` and ``executemany``."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self._conn.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement after another, each synced, not psycopg's pipelined executemany: a
        backend waiting in the middle of a pipeline is not "idle in transaction", so a
        controller frozen there would keep the write lock for ever."""
        for row in rows:
            self._conn.execute(sql, tuple(row))


class PostgresVersions:
    """The schema version in ``meta``, under an advisory lock: two controllers starting at
    once migrate once."""

    name = "postgresql"

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))

    def version(self, conn: Any) -> int:
        if conn.execute("SELECT to_regclass('meta') AS t").fetchone()["t"] is None:
            return 0
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row["value"]) if row else 0

    def set_version(self, conn: Any, version: int) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (str(version),),
        )


def translate_pg(exc: psycopg.Error | psycopg_pool.PoolTimeout, where: str) -> StoreError | None:
    if isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.OutOfMemory):
        return StoreFull(
            f"the database {where} is out of space; nothing of this request was stored"
        )
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreUnavailable(f"the database {where} is read-only (a standby?): {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return StoreUnavailable(f"cannot reach the database {where}: {exc}")
    return None


def _session_options(**settings: float) -> str:
    """libpq ``options``: server settings for every session of a connection, in ms."""
    return " ".join(f"-c {name}={int(seconds * 1000)}" for name, seconds in settings.items())


class PostgresStore(SqlStore):
    def __init__(
        self,
        url: str,
        secrets_path: Path | None = None,
        pool_size: int = 8,
        timeout: float = 10,
        lease: float = LEASE,
    ) -> None:
        self.sql = _STATEMENTS
        self.searches = SearchStatements(self, _SEARCH_SQL)
        self.slurm = SlurmStatements(self, _SLURM_SQL)
        self.timelines = TimelineStatements(self, _TIMELINE_SQL)
        self.noise = NoiseStatements(self, _NOISE_SQL)
        self.watches = WatchStatements(self, _WATCH_SQL)
        self.faults = FaultStatements(self, _FAULT_SQL)
        self.url = url
        self.where = redact(url)
        self.secrets = HostSecrets(secrets_path)
        self.lease = lease
        self._connect_kwargs: dict[str, Any] = {
            "connect_timeout": 5,
            # a dead peer (host gone, cable cut) is noticed by TCP within ~lease as well
            "keepalives": 1,
            "keepalives_idle": max(1, int(lease)),
            "keepalives_interval": 1,
            "keepalives_count": 3,
        }
        self._turn = threading.Lock()  # one turn per controller: its other threads are refused
        self._turn_conn: psycopg.Connection[Any] | None = None
        self._turn_conn_lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        try:
            self._pool = psycopg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                timeout=timeout,
                kwargs={
                    **self._connect_kwargs,
                    "autocommit": True,
                    "row_factory": dict_row,
                    "options": _session_options(idle_in_transaction_session_timeout=lease),
                },
                open=False,
            )
            self._pool.open(wait=True, timeout=timeout)
            with self._pool.connection() as conn:
                self.migrated_from, self.schema_version = migrate(
                    _PgConnection(conn),
                    PostgresVersions(),
                    before={2: self._move_tokens_out},
                    after={5: self._copy_failures_out, 9: self._carry_launch_evidence},
                )
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            if hasattr(self, "_pool"):
                self._pool.close()
            raise translate_pg(exc, self.where) or StoreError(f"{self.where}: {exc}") from None

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5)
        with self._turn_conn_lock:
            if self._turn_conn is not None:
                self._turn_conn.close()
                self._turn_conn = None
        self._pool.close()

    def _errors(self, exc: psycopg.Error | psycopg_pool.PoolTimeout) -> StoreError | None:
        return translate_pg(exc, self.where)

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """One write transaction under the write lock; rolled back on any error."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                yield _PgConnection(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            translated = self._errors(exc)
            if translated is None:
                raise
            raise translated from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            with self._pool.connection() as conn:
                return _PgConnection(conn).execute(sql, params).fetchall()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            translated = self._errors(exc)
            if translated is None:
                raise
            raise translated from None

    def now(self) -> float:
        row = self._query("SELECT extract(epoch FROM clock_timestamp())::float8 AS now")
        return float(row[0]["now"])

    # --- the scheduling turn -----------------------------------------------------------------

    def _session(self) -> psycopg.Connection[Any]:
        """The turn's own connection (not the pool's): idle for ``lease`` seconds, the server
        ends it. Opened on first use and again after it was lost."""
        with self._turn_conn_lock:
            if self._turn_conn is None or self._turn_conn.closed:
                self._turn_conn = psycopg.connect(
                    self.url,
                    autocommit=True,
                    row_factory=dict_row,
                    application_name=f"tunelab-controller pid={os.getpid()} turn",
                    options=_session_options(idle_session_timeout=self.lease),
                    **self._connect_kwargs,
                )
            if self._heartbeat is None:
                self._heartbeat = threading.Thread(
                    target=self._beat, name="store-turn-heartbeat", daemon=True
                )
                self._heartbeat.start()
            return self._turn_conn

    def _beat(self) -> None:
        """Keep the turn's session from idling out while this controller runs."""
        while not self._stop.wait(self.lease / 4):
            with self._turn_conn_lock:
                conn = self._turn_conn
            if conn is None or conn.closed:
                continue
            with contextlib.suppress(psycopg.Error):  # a lost session: the next turn reopens
                conn.execute("SELECT 1")

    def _drop_session(self) -> None:
        with self._turn_conn_lock:
            if self._turn_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._turn_conn.close()
                self._turn_conn = None

    @contextmanager
    def scheduling_pass(self) -> Iterator[FencingToken | None]:
        """A token while this controller holds the scheduling turn; None while another
        controller (or another thread of this one) does. Taken once per control tick."""
        if not self._turn.acquire(blocking=False):
            yield None
            return
        try:
            try:
                conn = self._session()
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(%s) AS ok, pg_backend_pid() AS pid",
                    (SCHEDULE_LOCK,),
                ).fetchone()
            except psycopg.Error as exc:
                self._drop_session()
                raise self._errors(exc) or StoreError(f"{self.where}: {exc}") from None
            if row is None or not row["ok"]:
                yield None
                return
            try:
                with self._tx() as tx:
                    epoch = int(tx.execute(_BUMP_EPOCH).fetchone()["value"])
                yield FencingToken(epoch=epoch, holder=int(row["pid"]))
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEDULE_LOCK,))
                except psycopg.Error:
                    self._drop_session()  # a lost session has let go of the lock with it
        finally:
            self._turn.release()

    def _check_fence(self, conn: Any, fence: FencingToken) -> None:
        """In the transaction that commits a pass: still the epoch this turn took, and still
        held by the session that took it?"""
        row = conn.execute(self.sql.scheduler_epoch).fetchone()
        current = int(row["value"]) if row else 0
        held = conn.execute(
            _TURN_HELD, (SCHEDULE_LOCK >> 32, SCHEDULE_LOCK & 0xFFFFFFFF, fence.holder)
        ).fetchone()["held"]
        if current != fence.epoch or not held:
            raise StoreFenced(
                f"fenced: the scheduling turn passed to another controller (epoch {current}, "
                f"this pass ran in {fence.epoch}"
                + ("" if held else ", and its session no longer holds the turn")
                + "); nothing of this pass was committed"
            )

    def _after_import(self, conn: Any) -> None:
        """Identity columns do not follow explicitly inserted ids: move them past the rows."""
        for table, column in (("experiments", "seq"), ("events", "id")):
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "  # noqa: S608
                f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
            )
