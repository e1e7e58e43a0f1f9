"""Ordered schema migrations: ``migrations/NNNN_name.sql``, applied in order, each in its own
transaction with the version written in the same transaction (SQLite: ``PRAGMA user_version``;
PostgreSQL: the ``meta`` table, under an advisory lock so that two controllers starting at once
migrate once). One set of files for both engines: they are written in SQLite's dialect, and
the PostgreSQL dialect's ``ddl`` names the few types that differ (so the versions cannot drift).

A database of the release before versions existed has ``user_version`` 0 and every table of
version 1 (whose statements are all ``IF NOT EXISTS``), so it upgrades like an empty one. A
database newer than this code is refused: an older controller must not write a schema it does
not know. A migration may have Python steps (``before``/``after``) that run in its
transaction around its SQL, for what SQL alone cannot do (moving secrets out to a file).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from tunelab.controller.store.base import StoreError
from tunelab.controller.store.dialect import DIALECTS

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
    """Every migration shipped with the package, for ``dialect``, in version order (1..N)."""
    folder = resources.files("tunelab.controller.store").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            sql = entry.read_text()
            sql = DIALECTS[dialect].ddl(sql)
            found.append(Migration(int(match.group(1)), match.group(2), sql))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..N: {[m.version for m in found]}")
    return found


class SchemaVersions(Protocol):
    """How one engine begins a migration's transaction and reads and writes the version."""

    name: str  # the dialect's name

    def begin(self, conn: Any) -> None: ...
    def version(self, conn: Any) -> int: ...
    def set_version(self, conn: Any, version: int) -> None: ...


class SqliteVersions:
    """``PRAGMA user_version``, in a ``BEGIN IMMEDIATE`` transaction."""

    name = "sqlite"

    def begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def version(self, conn: Any) -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def set_version(self, conn: Any, version: int) -> None:
        conn.execute(f"PRAGMA user_version = {int(version):d}")


SQLITE_VERSIONS = SqliteVersions()


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
    conn: Any,
    versions: SchemaVersions,
    before: dict[int, Step] | None = None,
    after: dict[int, Step] | None = None,
) -> tuple[int, int]:
    """Bring the schema up to date; returns (version before, version after). A migration's
    ``before`` step runs in its transaction ahead of its SQL, its ``after`` step behind it."""
    dialect = versions
    migrations = load_migrations(dialect.name)
    latest = migrations[-1].version
    found = dialect.version(conn)
    if found > latest:
        raise SchemaTooNew(
            f"the database has schema version {found}; this tunelab knows up to {latest} "
            "(upgrade tunelab, or restore a backup made for this version)"
        )
    for migration in migrations[found:]:
        dialect.begin(conn)
        try:
            if dialect.version(conn) < migration.version:  # not done meanwhile by another
                first = (before or {}).get(migration.version)
                if first is not None:
                    first(conn)
                for statement in statements(migration.sql):
                    conn.execute(statement)
                last = (after or {}).get(migration.version)
                if last is not None:
                    last(conn)
                dialect.set_version(conn, migration.version)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return found, latest
