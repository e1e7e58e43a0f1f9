"""Ordered schema migrations: ``migrations/NNNN_name.sql`` (SQLite) and
``migrations/postgresql/NNNN_name.sql`` (the same versions in PostgreSQL's dialect), applied in
order, each in its own transaction with the version written in the same transaction (SQLite:
``PRAGMA user_version``; PostgreSQL: the ``meta`` table, under an advisory lock so that two
controllers starting at once migrate once).

A database of the release before versions existed has ``user_version`` 0 and every table of
version 1 (whose statements are all ``IF NOT EXISTS``), so it upgrades like an empty one. A
database newer than this code is refused: an older controller must not write a schema it does
not know. A migration may have a Python step (``STEPS``) that runs in its transaction before
its SQL, for what SQL alone cannot do (moving secrets out to a file).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from tunelab.controller.store.base import StoreError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
Step = Callable[[Any], None]


class SchemaTooNew(StoreError):
    """The database was written by a newer tunelab."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(dialect: str = "sqlite") -> list[Migration]:
    """Every migration shipped with the package for ``dialect``, in version order (1..N)."""
    folder = resources.files("tunelab.controller.store").joinpath("migrations")
    if dialect != "sqlite":
        folder = folder.joinpath(dialect)
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..N: {[m.version for m in found]}")
    return found


class Dialect(Protocol):
    """How one engine begins a migration's transaction and reads and writes the version."""

    name: str

    def begin(self, conn: Any) -> None: ...
    def version(self, conn: Any) -> int: ...
    def set_version(self, conn: Any, version: int) -> None: ...


class SqliteDialect:
    name = "sqlite"

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def version(self, conn: Any) -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def set_version(self, conn: Any, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version):d}")


SQLITE = SqliteDialect()


def statements(sql: str) -> list[str]:
    """Split a script into statements (``executescript`` would commit the transaction)."""
    out, buffer = [], ""
    for line in sql.splitlines(keepends=True):
        if not buffer and line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            out.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        out.append(buffer.strip())
    return out


def migrate(
    conn: Any, steps: dict[int, Step] | None = None, dialect: Dialect = SQLITE
) -> tuple[int, int]:
    """Bring the schema up to date; returns (version before, version after)."""
    migrations = load_migrations(dialect.name)
    latest = migrations[-1].version
    before = dialect.version(conn)
    if before > latest:
        raise SchemaTooNew(
            f"the database has schema version {before}; this tunelab knows up to {latest} "
            "(upgrade tunelab, or restore a backup made for this version)"
        )
    for migration in migrations[before:]:
        dialect.begin(conn)
        try:
            if dialect.version(conn) < migration.version:  # not done meanwhile by another
                step = (steps or {}).get(migration.version)
                if step is not None:
                    step(conn)
                for statement in statements(migration.sql):
                    conn.execute(statement)
                dialect.set_version(conn, migration.version)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return before, latest
