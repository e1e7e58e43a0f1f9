"""A ``--db`` setting: a SQLite file path or a ``postgresql://`` URL, checked, and shown without
its password (for the factory, the configuration and the PostgreSQL engine alike)."""

from __future__ import annotations

import re

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
