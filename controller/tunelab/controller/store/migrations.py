"""Ordered schema migrations: ``migrations/NNNN_name.sql``, applied in order, each in its own
transaction with ``PRAGMA user_version`` set to its number in the same transaction.

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

from tunelab.controller.store.base import StoreError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
Step = Callable[[sqlite3.Connection], None]


class SchemaTooNew(StoreError):
    """The database was written by a newer tunelab."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """Every migration shipped with the package, in version order (numbers 1..N, no gaps)."""
    folder = resources.files("tunelab.controller.store").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..N: {[m.version for m in found]}")
    return found


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


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, steps: dict[int, Step] | None = None) -> tuple[int, int]:
    """Bring the schema up to date; returns (version before, version after)."""
    migrations = load_migrations()
    latest = migrations[-1].version
    before = schema_version(conn)
    if before > latest:
        raise SchemaTooNew(
            f"the database has schema version {before}; this tunelab knows up to {latest} "
            "(upgrade tunelab, or restore a backup made for this version)"
        )
    for migration in migrations[before:]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            step = (steps or {}).get(migration.version)
            if step is not None:
                step(conn)
            for statement in statements(migration.sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {migration.version:d}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return before, latest
