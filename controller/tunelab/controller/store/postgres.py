"""PostgreSQL store: the same statements as the SQLite store, over pooled psycopg 3 connections,
for several controllers on one database.

Every statement in ``sqlite.py`` is portable SQL (``?`` placeholders become ``%s`` here), so
this class replaces only the connection layer: the pool, transactions, errors, the migration
dialect, and two things only a shared database needs:

- **Writers are serialised.** Each write transaction first takes a transaction-level advisory
  lock, so the compare-and-set writes behave exactly as under SQLite's one writer; reads run in
  parallel (MVCC). A controller killed mid-transaction releases the lock with its session.
- **Scheduling passes are serialised.** ``scheduling_pass()`` holds a session advisory lock
  across one pass (read the queue, place, commit); a controller that finds it held skips the
  pass, so two controllers never place two runs on one free host.

psycopg 3 (``psycopg[binary]``) is PostgreSQL's maintained Python driver; ``psycopg_pool`` is
its pool. Times are seconds since the epoch in DOUBLE PRECISION, as in SQLite; ``now()`` reads
the database server's clock, one clock for every controller.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from tunelab.controller.store.base import StoreConflict, StoreError, StoreFull, StoreUnavailable
from tunelab.controller.store.factory import redact
from tunelab.controller.store.migrations import migrate
from tunelab.controller.store.secrets import HostSecrets
from tunelab.controller.store.sqlite import SqliteStore

WRITE_LOCK = 0x7475_6E65_0001  # "tune" + 1: one writer at a time
SCHEDULE_LOCK = 0x7475_6E65_0002  # one scheduling pass at a time
MIGRATE_LOCK = 0x7475_6E65_0003


@functools.lru_cache(maxsize=512)
def _pg_sql(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class _PgConnection:
    """What the shared statements need of a connection: ``execute`` and ``executemany``."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self._conn.execute(_pg_sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self._conn.cursor() as cursor:
                cursor.executemany(_pg_sql(sql), rows)


class PostgresDialect:
    name = "postgresql"

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATE_LOCK,))

    def version(self, conn: Any) -> int:
        if conn.execute("SELECT to_regclass('meta') AS t").fetchone()["t"] is None:
            return 0
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row["value"]) if row else 0

    def set_version(self, conn: Any, version: int) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (str(version),),
        )


def translate_pg(exc: psycopg.Error, where: str) -> StoreError | None:
    if isinstance(exc, psycopg.errors.DiskFull | psycopg.errors.OutOfMemory):
        return StoreFull(
            f"the database {where} is out of space; nothing of this request was stored"
        )
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return StoreUnavailable(f"the database {where} is read-only (a standby?): {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return StoreUnavailable(f"cannot reach the database {where}: {exc}")
    return None


class PostgresStore(SqliteStore):
    def __init__(
        self, url: str, secrets_path: Path | None = None, pool_size: int = 8, timeout: float = 10
    ) -> None:
        # not SqliteStore.__init__: no file, no pragmas; the statements are inherited
        self.url = url
        self.path = Path("postgresql")  # not a file: messages use self.where
        self.where = redact(url)
        self._identity = None
        self.secrets = HostSecrets(secrets_path)
        self._turn = threading.RLock()  # re-entrant in its thread, refused to the others
        self._turn_depth = 0
        self._epoch: int | None = None
        try:
            self._pool = psycopg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                timeout=timeout,
                kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": 5},
                open=False,
            )
            self._pool.open(wait=True, timeout=timeout)
            with self._pool.connection() as conn:
                self.migrated_from, self.schema_version = migrate(
                    _PgConnection(conn), {2: self._move_tokens_out}, PostgresDialect()
                )
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            if hasattr(self, "_pool"):
                self._pool.close()
            raise translate_pg(exc, self.where) or StoreError(f"{self.where}: {exc}") from None

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """One write transaction under the write lock; rolled back on any error."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                yield _PgConnection(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            translated = translate_pg(exc, self.where)
            if translated is None:
                raise
            raise translated from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            with self._pool.connection() as conn:
                return _PgConnection(conn).execute(sql, params).fetchall()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            translated = translate_pg(exc, self.where)
            if translated is None:
                raise
            raise translated from None

    @contextmanager
    def scheduling_pass(self) -> Iterator[bool]:
        """True while this controller holds the scheduling lock; False: another one does.

        Re-entrant in the thread that holds it (a control tick holds it and its scheduling
        pass asks again). Each acquisition bumps the fencing epoch in ``meta``; the pass's
        commit (``create_attempts``) checks it in the same transaction, so a controller whose
        session (and with it the lock) was lost mid-pass cannot commit, and calls no agent."""
        if not self._turn.acquire(blocking=False):
            yield False  # another thread of this controller holds the turn
            return
        try:
            if self._turn_depth:
                self._turn_depth += 1
                try:
                    yield True
                finally:
                    self._turn_depth -= 1
                return
            with self._pool.connection() as conn:
                got: Any = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (SCHEDULE_LOCK,))
                if not got.fetchone()["ok"]:
                    yield False
                    return
                try:
                    self._epoch = self._bump_epoch()
                    self._turn_depth = 1
                    yield True
                finally:
                    self._turn_depth = 0
                    self._epoch = None
                    with contextlib.suppress(psycopg.Error):  # a dead session has let go
                        conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEDULE_LOCK,))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            # the turn's own session (taking the pool's connection, the lock) names the
            # database like every other call does, so the log says why the queue stopped
            translated = translate_pg(exc, self.where)
            if translated is None:
                raise
            raise translated from None
        finally:
            self._turn.release()

    def _bump_epoch(self) -> int:
        with self._tx() as conn:
            row = conn.execute(
                "INSERT INTO meta (key, value) VALUES ('scheduler_epoch', '1') ON CONFLICT (key) "
                "DO UPDATE SET value = (meta.value::bigint + 1)::text RETURNING value"
            ).fetchone()
        return int(row["value"])

    def _fence(self, conn: Any) -> None:
        """In the transaction that commits a pass: still the epoch this controller took?"""
        row = conn.execute("SELECT value FROM meta WHERE key = 'scheduler_epoch'").fetchone()
        current = int(row["value"]) if row else 0
        if self._epoch is None or current != self._epoch:
            raise StoreConflict(
                f"fenced: the scheduling turn passed to another controller (epoch {current}, "
                f"this one holds {self._epoch}); nothing of this pass was committed"
            )

    def _after_import(self, conn: Any) -> None:
        """Identity columns do not follow explicitly inserted ids: move them past the rows."""
        for table, column in (("experiments", "seq"), ("events", "id")):
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "  # noqa: S608
                f"COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
            )

    def now(self) -> float:
        row = self._query("SELECT extract(epoch FROM clock_timestamp())::float8 AS now")
        return float(row[0]["now"])
