"""``--db``: a SQLite file path, or a ``postgresql://`` URL (psycopg is imported only then)."""

from __future__ import annotations

import re
from pathlib import Path

from tunelab.controller.store.base import Store, StoreUnavailable
from tunelab.controller.store.sqlite import SqliteStore

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(db: str) -> bool:
    return "://" in db


def redact(db: str) -> str:
    """The setting without a URL's password, for messages and logs."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", db)


def check_db(db: str) -> str | None:
    """What is wrong with a ``db`` setting, or None."""
    if not db:
        return "must be a file path or a postgresql:// URL"
    if is_url(db) and not db.startswith(URL_SCHEMES):
        return f"unsupported database URL {db.split('://')[0]}:// (a file path or postgresql://)"
    return None


def open_store(db: str, secrets_file: Path | None = None, turn_lease: float | None = None) -> Store:
    """The store for ``db``; host tokens go to ``secrets_file`` (default: ``<db>.secrets`` for a
    file; for PostgreSQL the setting ``secrets_file``, or none kept). ``turn_lease``: how long a
    frozen controller keeps PostgreSQL's scheduling turn (default: the store's, 3 s)."""
    if db.startswith(URL_SCHEMES):
        try:
            from tunelab.controller.store.postgres import LEASE, PostgresStore
        except ImportError as exc:
            raise StoreUnavailable(
                f"--db {redact(db)}: PostgreSQL needs psycopg, which is not installed "
                f"({exc}); install it with: pip install 'tunelab[postgresql]'"
            ) from None

        return PostgresStore(db, secrets_file, lease=turn_lease or LEASE)
    return SqliteStore(Path(db).expanduser(), secrets_file)
