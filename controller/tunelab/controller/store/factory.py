"""``--db``: a SQLite file path, or a ``postgresql://`` URL (psycopg is imported only then).
What a setting is and how it is shown are in dburl.py, which the engines import too."""

from __future__ import annotations

from pathlib import Path

from tunelab.controller.store.base import Store, StoreUnavailable
from tunelab.controller.store.dburl import URL_SCHEMES, check_db, is_url, redact
from tunelab.controller.store.sqlite import SqliteStore


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


__all__ = ["URL_SCHEMES", "check_db", "is_url", "open_store", "redact"]
