"""Integration: the store contract on both stores — a SQLite file and a real PostgreSQL server
(tests/support/postgres.py) — and what only a shared database needs: two controllers' stores
scheduling on one database never place two runs on one host."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import PostgresServer
from tests.unit.controller import test_store_scheduler as unit
from tests.unit.controller.test_store_scheduler import host, queue
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.states import AttemptState
from tunelab.controller.store import HostRow, SqliteStore, StoreConflict, StoreError
from tunelab.controller.store.factory import open_store
from tunelab.controller.store.migrations import load_migrations
from tunelab.controller.store.postgres import SCHEDULE_LOCK, PostgresStore

# The scheduler/store tests of tests/unit, collected here again with `store` over both engines
# (the reopen test opens a SQLite file by name: it stays in unit).
globals().update(
    (name, test)
    for name, test in vars(unit).items()
    if name.startswith("test_") and name != "test_the_database_survives_a_reopen"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SqliteStore:
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "controller.db")
    server: PostgresServer = request.getfixturevalue("postgres")
    return PostgresStore(server.new_database(), tmp_path / "secrets.json")


def test_the_open_store_follows_the_db_setting(tmp_path: Path, postgres: PostgresServer) -> None:
    assert type(open_store(str(tmp_path / "c.db"))) is SqliteStore
    pg = open_store(postgres.new_database())
    assert isinstance(pg, PostgresStore)
    assert not (Path.cwd() / "postgresql:").exists()  # never taken for a folder name


def test_both_engines_reach_the_same_schema_version(store: SqliteStore) -> None:
    assert store.schema_version == load_migrations()[-1].version


def test_host_tokens_stay_out_of_the_database(store: SqliteStore) -> None:
    store.add_host(HostRow(name="h", address="h:1", token="pg-secret-token"))
    assert store.get_host("h").token == "pg-secret-token"  # type: ignore[union-attr]
    columns = {k for r in store._query("SELECT * FROM hosts") for k in r.keys()}  # noqa: SIM118
    assert "token" not in columns
    with pytest.raises(StoreConflict, match="exists"):
        store.add_host(HostRow(name="h", address="h:2"))
    store.add_host(HostRow(name="h", address="h:2"), replace=True)
    assert store.get_host("h").address == "h:2"  # type: ignore[union-attr]


def test_name_lookup_and_batched_reads(store: SqliteStore) -> None:
    ids = queue(store, n=5)
    found = store.find_experiment_by_name("s#3")
    assert found is not None and found.id == ids[2]
    assert set(store.get_experiments(ids)) == set(ids)
    assert store.attempts_for_many(ids) == {i: [] for i in ids}
    assert store.now() > 1.7e9


def test_a_newer_postgres_schema_is_refused(postgres: PostgresServer) -> None:
    url = postgres.new_database()
    PostgresStore(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        PostgresStore(url)


def test_an_unreachable_postgres_is_one_clear_error() -> None:
    with pytest.raises(StoreError, match="cannot reach the database postgresql://u:\\*\\*\\*@"):
        PostgresStore("postgresql://u:hunter2@127.0.0.1:1/x", timeout=2)


def test_two_controllers_on_one_database_never_double_book_a_host(
    postgres: PostgresServer,
) -> None:
    url = postgres.new_database()
    first, second = PostgresStore(url), PostgresStore(url)
    queue(first, n=60)
    for i in range(12):
        host(first, f"h{i}", 0)
    with first.scheduling_pass() as ours:
        assert ours
        assert Scheduler(second).pass_once() == []  # the other controller skips the pass
    created: list[str] = []
    lock = threading.Lock()

    def schedule(store: SqliteStore) -> None:
        for _ in range(20):
            made = Scheduler(store).pass_once()
            with lock:
                created.extend(a.id for a in made)
            for attempt in made:  # finish some, so that passes keep placing
                store.finish_attempt(attempt.id, AttemptState.SUCCEEDED, [AttemptState.DISPATCHING])

    threads = [threading.Thread(target=schedule, args=(s,)) for s in (first, second) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    live = Counter(a.host for a in first.live_attempts())
    assert all(n <= 1 for n in live.values()), live
    rows = first._query("SELECT experiment_id FROM attempts")
    per_experiment = Counter(r["experiment_id"] for r in rows)
    assert all(n == 1 for n in per_experiment.values()), per_experiment
    assert len(created) == len(set(created)) > 12


def test_a_controller_that_lost_its_turn_cannot_commit_a_pass(postgres: PostgresServer) -> None:
    """Fencing: A holds the scheduling lock; its session dies (a partition, a restarted
    backend); B takes the turn; A's pass, still running, is refused at its commit and places
    nothing (so it calls no agent)."""
    url = postgres.new_database()
    first, second = PostgresStore(url), PostgresStore(url)
    queue(first, n=2)
    host(first, "h1", 0)
    with first.scheduling_pass() as ours:
        assert ours
        high, low = SCHEDULE_LOCK >> 32, SCHEDULE_LOCK & 0xFFFFFFFF
        with psycopg.connect(url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = %s AND objid = %s",
                (high, low),
            ).fetchall()
            assert killed == [(True,)]
            # pg_terminate_backend only signals: wait until that backend is gone with its lock
            deadline = time.monotonic() + 10
            while admin.execute(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                "AND objid = %s",
                (high, low),
            ).fetchall():
                assert time.monotonic() < deadline, "the killed backend kept its lock"
                time.sleep(0.02)
        with second.scheduling_pass() as theirs:
            assert theirs
        with pytest.raises(StoreConflict, match="fenced: the scheduling turn passed"):
            Scheduler(first).pass_once()
    assert first.live_attempts() == []
    assert len(Scheduler(second).pass_once()) == 1  # the new holder schedules
