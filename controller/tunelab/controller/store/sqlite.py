"""SQLite engine of the controller store (WAL, one connection): one file, one controller.

The statements and transactions are core.SqlStore's over statements.py in the SQLite dialect;
this module is the connection layer. The schema is versioned (schema.py); the files are
0600, host tokens live in a separate 0600 secrets file (secrets.py), and the file is watched for
deletion or replacement (dbfile.py). One file has one controller, so its scheduling turn is
always this controller's and its fencing token never goes stale.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tunelab.controller.store.base import StoreError
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.dbfile import FileIdentity, create_private, translate
from tunelab.controller.store.dialect import SQLITE
from tunelab.controller.store.faults import FaultSql, FaultStatements
from tunelab.controller.store.models import FencingToken
from tunelab.controller.store.noisebook import NoiseSql, NoiseStatements
from tunelab.controller.store.schema import SQLITE_VERSIONS, migrate
from tunelab.controller.store.searches import SearchSql, SearchStatements
from tunelab.controller.store.secrets import HostSecrets
from tunelab.controller.store.slurmbook import SlurmSql, SlurmStatements
from tunelab.controller.store.statements import Statements
from tunelab.controller.store.timelinebook import TimelineSql, TimelineStatements
from tunelab.controller.store.watches import WatchSql, WatchStatements

_STATEMENTS = Statements(SQLITE)
_SEARCH_SQL = SearchSql(SQLITE)
_SLURM_SQL = SlurmSql(SQLITE)
_TIMELINE_SQL = TimelineSql(SQLITE)
_NOISE_SQL = NoiseSql(SQLITE)
_WATCH_SQL = WatchSql(SQLITE)
_FAULT_SQL = FaultSql(SQLITE)
_TURN = FencingToken(epoch=0)


class SqliteStore(SqlStore):
    def __init__(self, path: Path | str, secrets_file: Path | None = None) -> None:
        self.sql = _STATEMENTS
        self.searches = SearchStatements(self, _SEARCH_SQL)
        self.slurm = SlurmStatements(self, _SLURM_SQL)
        self.timelines = TimelineStatements(self, _TIMELINE_SQL)
        self.noise = NoiseStatements(self, _NOISE_SQL)
        self.watches = WatchStatements(self, _WATCH_SQL)
        self.faults = FaultStatements(self, _FAULT_SQL)
        self.path = Path(path)
        self.where = str(path)
        memory = str(path) == ":memory:"
        self._identity: FileIdentity | None = None
        self.secrets = HostSecrets(secrets_file or (None if memory else Path(f"{path}.secrets")))
        self._lock = threading.RLock()  # the one connection, one statement or transaction at a time
        try:
            if not memory:
                create_private(self.path)
            self._conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=30
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute("PRAGMA secure_delete=ON")  # freed pages hold no old values
            before, self.schema_version = migrate(
                self._conn,
                SQLITE_VERSIONS,
                before={2: self._move_tokens_out},
                after={5: self._copy_failures_out, 9: self._carry_launch_evidence},
            )
            self.migrated_from = before
            if before < 2 <= self.schema_version and not memory:
                self._conn.execute("VACUUM")  # no page of the old token column survives
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) or StoreError(f"{self.path}: {exc}") from None
        if not memory:
            self._identity = FileIdentity(self.path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def scheduling_pass(self) -> Iterator[FencingToken | None]:
        """One SQLite file has one controller: its turn is always this controller's."""
        yield _TURN

    def _check_fence(self, conn: Any, fence: FencingToken) -> None:
        """Nothing to check: no other controller can take a SQLite file's turn."""

    def _after_import(self, conn: Any) -> None:
        """SQLite's AUTOINCREMENT follows explicitly inserted ids by itself."""

    def now(self) -> float:
        return time.time()

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

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                translated = translate(exc, self.path)
                if translated is None:
                    raise
                raise translated from None
