"""Unit: the store's schema versions, files and failures, on real SQLite files in tmp_path:
upgrading the committed database of the release before versions, 0600 files whatever the
umask, no token in any database file, a deleted or replaced file, a full database."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from tunelab.controller.states import ExperimentState, HostState, SearchState, TrialState
from tunelab.controller.store import (
    ExperimentRow,
    HostRow,
    SqliteStore,
    StoreError,
    StoreFull,
    StoreUnavailable,
)
from tunelab.controller.store.dialect import POSTGRESQL
from tunelab.controller.store.schema import load_migrations, statements
from tunelab.controller.store.search_models import SearchRow, TrialRow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "store"
OLD_DB = FIXTURES / "controller-f58540c.db"
OLD_TOKEN = b"fixture-agent-token-a"
LATEST = load_migrations()[-1].version


def old_db(tmp_path: Path) -> Path:
    target = tmp_path / "controller.db"
    shutil.copyfile(OLD_DB, target)
    return target


def database_bytes(path: Path) -> bytes:
    return b"".join(
        Path(f"{path}{s}").read_bytes() for s in ("", "-wal", "-shm") if Path(f"{path}{s}").exists()
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def row(experiment_id: str, name: str = "n") -> ExperimentRow:
    return ExperimentRow(experiment_id, "g", name, ExperimentState.QUEUED, {"host": {}}, 0)


# what migration 9 added, dropped again by a test that goes back to an older version
VERSION_9_COLUMNS = "".join(
    f"ALTER TABLE search_trials DROP COLUMN {c};"
    for c in ("phase", "race_round", "load_axis", "load_value", "slo_ratios_json", "host",
              "gpu_seconds")
)  # fmt: skip


def test_version_9_carries_a_search_trials_evidence_out_of_its_details(tmp_path: Path) -> None:
    """A search trial written before migration 9 kept its race round, load, SLO margins, host
    and GPU-seconds in details only; the migration's step makes them columns."""
    path = tmp_path / "controller.db"
    store = SqliteStore(path)
    store.insert_search(SearchRow("g-o", "s", SearchState.RUNNING, {}, {}, 1.0))
    old = {"drift": "end", "load": {"rate": 2.5}, "slo_margins": {"ttft_p99_ms": -0.5},
           "host": "h", "gpu_seconds": 3.0}  # fmt: skip
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.add_trials(
            [TrialRow("g-o", 1, {"a": 1}, TrialState.DONE, 1.0, details=old)], [], turn
        )
    store.close()
    with sqlite3.connect(path) as conn:  # back to version 8
        conn.executescript(VERSION_9_COLUMNS)
        conn.execute("PRAGMA user_version = 8")
    [trial] = SqliteStore(path).search_trials("g-o")
    assert (trial.phase, trial.load, trial.host, trial.gpu_seconds) == (
        "drift_end",
        ("rate", 2.5),
        "h",
        3.0,
    )
    assert trial.slo_ratios == {"ttft_p99_ms": 1.5}


def test_version_4_moves_the_waits_copied_onto_queued_rows_into_one_row_per_selector(
    tmp_path: Path,
) -> None:
    path = tmp_path / "controller.db"
    SqliteStore(path).insert_experiments([row("a", "a"), row("b", "b"), row("c", "c")])
    with sqlite3.connect(path) as conn:  # back to version 3: the wait copied onto each row
        conn.executescript(
            "DROP VIEW experiments_shown; DROP TABLE queue_waits; PRAGMA user_version = 3;"
            # and without version 5's columns and table, which come after
            "ALTER TABLE attempts DROP COLUMN failure_reason;"
            "ALTER TABLE attempts DROP COLUMN failure_line; DROP TABLE submissions;"
            "UPDATE experiments SET message = 'waiting for a free host';"
            "UPDATE experiments SET message = 'attempt 1 lost on h; queued again' WHERE id = 'c';"
        )
        conn.executescript(VERSION_9_COLUMNS)

    store = SqliteStore(path)

    assert store.schema_version == LATEST
    assert [dict(r) for r in store._query("SELECT * FROM queue_waits")] == [
        {"selector_key": row("a").selector_key, "message": "waiting for a free host"}
    ]
    own = {r["id"]: r["message"] for r in store._query("SELECT id, message FROM experiments")}
    assert own == {"a": "", "b": "", "c": "attempt 1 lost on h; queued again"}
    assert store.get_experiment("a").message == "waiting for a free host"  # type: ignore[union-attr]


def test_the_database_of_the_release_before_versions_upgrades_in_place(tmp_path: Path) -> None:
    assert OLD_TOKEN in OLD_DB.read_bytes()  # the fixture is what that release wrote
    path = old_db(tmp_path)
    store = SqliteStore(path)
    assert store.schema_version == LATEST
    hosts = {h.name: h for h in store.list_hosts()}
    assert hosts["gpu-a"].token == OLD_TOKEN.decode()  # moved to the secrets file, not lost
    assert hosts["gpu-b"].token is None
    assert hosts["gpu-a"].state is HostState.READY and hosts["gpu-a"].gpu_count == 8
    states = store.count_experiments_by_state()
    assert states == {"SUCCEEDED": 1, "RUNNING": 1, "QUEUED": 2}
    assert [a.state.value for a in store.attempts_for("x-00000001")] == ["STARTING"]
    assert store.attempts_for("x-00000000")[0].result is not None
    assert len(store.events_for("x-00000000")) >= 5
    found = store.find_experiment_by_name("fixture/--max-num-seqs=128#2")
    assert found is not None and found.id == "x-00000003"
    store.insert_experiments([row("x-new")])  # the upgraded schema takes new rows
    store.close()
    assert OLD_TOKEN not in database_bytes(path)  # not in the db, its WAL, or a freed page
    secrets = Path(f"{path}.secrets")
    assert OLD_TOKEN in secrets.read_bytes() and mode(secrets) == 0o600
    again = SqliteStore(path)  # opening an up-to-date database changes nothing
    assert again.schema_version == LATEST and again.get_experiment("x-new") is not None
    assert again.get_host("gpu-a") is not None and again.get_host("gpu-a").token  # type: ignore[union-attr]


def test_a_database_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {LATEST + 1}")
    with pytest.raises(StoreError, match=f"schema version {LATEST + 1}; this tunelab knows up to"):
        SqliteStore(path)


def test_name_lookup_uses_an_index(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    store.insert_experiments([row(f"x-{i}", f"name-{i % 50}") for i in range(200)])
    found = store.find_experiment_by_name("name-7")
    assert found is not None and found.id == "x-157"  # the latest of that name
    with sqlite3.connect(tmp_path / "c.db") as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM experiments WHERE name = ? ORDER BY seq DESC LIMIT 1",
            ("name-7",),
        ).fetchall()
    assert "experiments_by_name" in str(plan)


def test_batched_reads_return_every_row(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    store.insert_experiments([row(f"x-{i}") for i in range(1200)])
    store.add_host(HostRow(name="h", address="h:1"))
    with store.scheduling_pass() as turn:
        assert turn is not None
        created = store.create_attempts([(f"x-{i}", "h", []) for i in range(0, 1200, 2)], 1.0, turn)
    assert len(created) == 600
    ids = [f"x-{i}" for i in range(1200)]
    attempts = store.attempts_for_many(ids)
    assert sum(len(a) for a in attempts.values()) == 600 and attempts["x-1"] == []
    assert [a.id for a in attempts["x-2"]] == ["x-2-a1"]
    assert set(store.get_experiments(ids)) == set(ids)


def test_files_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state" / "controller.db"
    old = os.umask(0)
    try:
        store = SqliteStore(path)
        store.add_host(HostRow(name="h", address="h:1", token="per-host-secret"))
        store.insert_experiments([row("x-1")])
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}.secrets")]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        assert b"per-host-secret" not in database_bytes(path)
        store.close()
    finally:
        os.umask(old)


def test_files_left_0644_by_the_old_release_are_tightened(tmp_path: Path) -> None:
    path = old_db(tmp_path)
    wal = Path(f"{path}-wal")
    wal.touch(mode=0o644)
    wal.chmod(0o644)
    SqliteStore(path).close()
    assert mode(path) == 0o600
    if wal.exists():
        assert mode(wal) == 0o600


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_deleted_or_replaced_file_stops_writes_with_a_clear_error(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "c.db"
    store = SqliteStore(path)
    store.insert_experiments([row("x-1")])
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    else:
        other = tmp_path / "other.db"
        SqliteStore(other).close()
        other.replace(path)
    with pytest.raises(StoreUnavailable, match=f"{how} while the controller ran; writes are"):
        store.insert_experiments([row("x-2")])
    with pytest.raises(StoreUnavailable):
        store.add_host(HostRow(name="h", address="h:1"))
    assert store.get_experiment("x-1") is not None  # reads still answer from the open file


def test_a_full_database_rolls_back_and_says_so(tmp_path: Path) -> None:
    """SQLITE_FULL, as a full disk gives it (the disk-full case with a real tmpfs is in the
    integration tests): the whole submission is refused, nothing half-stored."""
    path = tmp_path / "c.db"
    store = SqliteStore(path)
    store.insert_experiments([row("x-0")])
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    big = [
        ExperimentRow(f"x-{i}", "g", "n", ExperimentState.QUEUED, {"pad": "x" * 4000}, 0)
        for i in range(1, 50)
    ]
    with pytest.raises(StoreFull, match="is full; nothing of this request was stored"):
        store.insert_experiments(big)
    assert store.count_experiments_by_state() == {"QUEUED": 1}
    store.insert_experiments([row("x-small")])  # small writes go on once there is room


def test_statements_split_like_sqlite() -> None:
    sql = "-- a comment\nCREATE TABLE t (a TEXT DEFAULT ';');\nCREATE INDEX i ON t (a);\n"
    assert statements(sql) == ["CREATE TABLE t (a TEXT DEFAULT ';');", "CREATE INDEX i ON t (a);"]


def test_one_set_of_migrations_serves_both_engines() -> None:
    sql = "CREATE TABLE t (seq INTEGER PRIMARY KEY AUTOINCREMENT, n INTEGER, at REAL, s TEXT);"
    assert POSTGRESQL.ddl(sql) == (  # SQLite DDL -> PostgreSQL's
        "CREATE TABLE t (seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, n BIGINT, "
        "at DOUBLE PRECISION, s TEXT);"
    )
    sqlite, postgres = load_migrations("sqlite"), load_migrations("postgresql")
    assert [m.version for m in sqlite] == [m.version for m in postgres]
    assert "AUTOINCREMENT" not in "".join(m.sql for m in postgres)


def test_version_5_copies_failure_reasons_out_of_results_into_columns(tmp_path: Path) -> None:
    path = tmp_path / "controller.db"
    store = SqliteStore(path)
    store.insert_experiments([row("a"), row("b")])
    store.add_host(HostRow(name="h", address="h:1"))
    failed = store.create_attempt("a", "h", [], 1.0)
    plain = store.create_attempt("b", "h", [], 1.0)
    reason = {"failure_reason": "CUDA_OOM", "failure_line": "CUDA out of memory", "points": []}
    store.update_attempt(failed.id, result=reason)
    store.update_attempt(plain.id, result={"points": []})
    store.close()
    with sqlite3.connect(path) as conn:  # back to version 4: the reason only inside the result
        conn.executescript(
            "ALTER TABLE attempts DROP COLUMN failure_reason;"
            "ALTER TABLE attempts DROP COLUMN failure_line; DROP TABLE submissions;"
            "PRAGMA user_version = 4;"
        )
        conn.executescript(VERSION_9_COLUMNS)

    store = SqliteStore(path)

    assert store.migrated_from == 4 and store.schema_version == LATEST
    moved = store.get_attempt(failed.id)
    assert moved is not None and (moved.failure_reason, moved.failure_line) == (
        "CUDA_OOM",
        "CUDA out of memory",
    )
    assert moved.result == reason  # the result itself is kept as it was
    assert store.get_attempt(plain.id).failure_reason == ""  # type: ignore[union-attr]
