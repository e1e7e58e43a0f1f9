"""Export a store to JSON lines and import them into an empty one: how a lab moves its history
between SQLite and PostgreSQL (either way). Rows keep their ids and submission order; host
tokens are not exported (they live in the secrets file: copy it, or add the tokens again)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from tunelab.controller.store.base import StoreConflict
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.statements import Statements

TABLES = (
    "hosts",
    "experiments",
    "attempts",
    "events",
    "submissions",
    "searches",
    "search_trials",
    "slurm_pools",
    "slurm_jobs",
    "watches",
    "watch_occurrences",
    "attempt_timelines",
    "noise_profiles",
)  # in the order foreign keys need (a pool names a host, a job an attempt)
FORMAT = "tunelab-store-export"
BATCH = 500


def export_lines(store: SqlStore) -> Iterator[str]:
    yield json.dumps({"format": FORMAT, "schema_version": store.schema_version})
    for table in TABLES:
        order = {
            "experiments": "seq",
            "events": "id",
            "hosts": "name",
            "attempts": "id",
            "submissions": "request_id",
            "searches": "grp",
            "search_trials": "grp, number",
            "slurm_pools": "name",
            "slurm_jobs": "attempt_id",
            "attempt_timelines": "attempt_id",
            "noise_profiles": "host_class, engine, model",
            "watches": "name",
            "watch_occurrences": "watch, number",
        }[table]
        for row in store._query(f"SELECT * FROM {table} ORDER BY {order}"):  # noqa: S608
            yield json.dumps({"table": table, "row": dict(row)}, sort_keys=True)


def import_lines(store: SqlStore, lines: Iterable[str]) -> dict[str, int]:
    """Rows imported per table; refused (nothing written) unless the target store is empty."""
    it = iter(lines)
    header = json.loads(next(it, "{}"))
    if header.get("format") != FORMAT:
        raise ValueError("not a tunelab store export (first line)")
    if header.get("schema_version") != store.schema_version:
        raise ValueError(
            f"the export is of schema version {header.get('schema_version')}, the target "
            f"{store.schema_version}: open the source with this tunelab first (it migrates)"
        )
    counts = dict.fromkeys(TABLES, 0)
    with store._tx() as conn:
        for table in TABLES:
            if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchall():  # noqa: S608
                raise StoreConflict(f"the target already has {table}: import into an empty store")
        pending: dict[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]] = {}
        done = -1  # index in TABLES of the last table seen: parents are written before children
        for number, line in enumerate(it, start=2):
            if not line.strip():
                continue
            item = json.loads(line)
            table, row = item.get("table"), item.get("row")
            if table not in TABLES or not isinstance(row, dict):
                raise ValueError(f"line {number}: expected {{table, row}} of {TABLES}")
            if TABLES.index(table) < done:
                raise ValueError(f"line {number}: {table} after {TABLES[done]}")
            if TABLES.index(table) > done:
                _flush(store.sql, conn, pending)
                done = TABLES.index(table)
            key = (table, tuple(row))
            pending.setdefault(key, []).append(tuple(row.values()))
            counts[table] += 1
            if len(pending[key]) >= BATCH:
                _insert(store.sql, conn, key, pending.pop(key))
        _flush(store.sql, conn, pending)
        store._after_import(conn)
    return counts


def _flush(
    sql: Statements, conn: Any, pending: dict[tuple[str, tuple[str, ...]], list[tuple[Any, ...]]]
) -> None:
    for key in list(pending):
        _insert(sql, conn, key, pending.pop(key))


def _insert(
    sql: Statements, conn: Any, key: tuple[str, tuple[str, ...]], rows: list[tuple[Any, ...]]
) -> None:
    table, columns = key
    for column in columns:
        if not column.replace("_", "").isalnum():
            raise ValueError(f"bad column name {column!r}")
    for start in range(0, len(rows), BATCH):  # multi-row INSERTs: one statement per batch
        chunk = rows[start : start + BATCH]
        conn.execute(sql.insert_rows(table, columns, len(chunk)), [v for r in chunk for v in r])
