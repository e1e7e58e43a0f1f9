"""Integration: the search driver's tests of tests/unit, collected again over a real PostgreSQL
server (tests/support/postgres.py): the searches' statements (migration 0006,
0006_searches.sql) are portable, and a controller that reopens the database resumes a search
without running a finished trial again."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import PostgresServer
from tests.unit.controller import test_search_driver as unit
from tests.unit.controller.test_search_driver import (
    BASE,
    OPTIMUM,
    SEARCH,
    run_queued,
    submit,
    with_hosts,
)
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.states import SearchState
from tunelab.controller.store import StoreFenced
from tunelab.controller.store.postgres import SCHEDULE_LOCK, PostgresStore

globals().update(
    (name, test)
    for name, test in vars(unit).items()
    if name.startswith("test_")
    and name != "test_a_restarted_driver_resumes_without_running_a_finished_trial_again"
)


@pytest.fixture
def store(postgres: PostgresServer, tmp_path: Path) -> PostgresStore:
    return with_hosts(PostgresStore(postgres.new_database(), tmp_path / "secrets.json"))  # type: ignore[arg-type,return-value]


def test_a_reopened_postgresql_store_resumes_the_search(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.new_database()
    store = PostgresStore(url, tmp_path / "secrets.json")
    with_hosts(store)  # type: ignore[arg-type]
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))  # type: ignore[arg-type]
    SearchDriver(store, store.now).tick()
    first = run_queued(store)  # type: ignore[arg-type]
    store.close()
    store = PostgresStore(url, tmp_path / "secrets.json")
    doc = unit.until_done(store, SearchDriver(store, store.now))  # type: ignore[arg-type]
    experiments = [t["experiment"] for t in doc["trials"]]
    proposed = [t for t in doc["trials"] if not t.get("race") and not t.get("drift")]
    assert experiments[:4] == first and len(proposed) == 8  # the race's and drift's come after
    assert len(set(experiments)) == len(experiments)  # one experiment per trial, none twice
    assert doc["best"]["params"] == OPTIMUM


def lose_turn(url: str) -> None:
    """End the session holding the scheduling turn (a partition, a restarted backend) and wait
    until its lock is gone with it."""
    high, low = SCHEDULE_LOCK >> 32, SCHEDULE_LOCK & 0xFFFFFFFF
    held = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s"
    kill = (
        "SELECT pg_terminate_backend(pid) FROM pg_locks "
        "WHERE locktype = 'advisory' AND classid = %s AND objid = %s"
    )
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(kill, (high, low))
        deadline = time.monotonic() + 10
        while admin.execute(held, (high, low)).fetchall():
            assert time.monotonic() < deadline, "the killed backend kept its lock"
            time.sleep(0.02)


def test_a_fenced_controllers_late_search_writes_are_refused(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """Two controllers on one database: the first's search step runs in a turn it has lost
    (its session ended and the second took the turn). Its trial outcomes, new trials and the
    search's end are refused in their transactions; the turn's holder records them."""
    url = postgres.new_database()
    first = PostgresStore(url, tmp_path / "first.json")
    second = PostgresStore(url, tmp_path / "second.json")
    with_hosts(first)  # type: ignore[arg-type]
    submit(first, BASE + SEARCH.replace("STRATEGY", "grid"))  # type: ignore[arg-type]
    assert SearchDriver(first, first.now).tick() == 4  # takes the turn itself
    run_queued(first)  # type: ignore[arg-type]
    with first.scheduling_pass() as turn:
        assert turn is not None
        lose_turn(url)
        with second.scheduling_pass() as theirs:
            assert theirs is not None
        with pytest.raises(StoreFenced):
            SearchDriver(first, first.now).tick(turn)  # would record 4 outcomes, queue 4 more
        with pytest.raises(StoreFenced):
            first.finish_search("g-1", SearchState.CANCELLED, "late", first.now(), turn)
    trials = second.search_trials("g-1")
    assert [t.state for t in trials] == ["RUNNING"] * 4  # nothing of the late step
    found = second.get_search("g-1")
    assert found is not None and found.state == "RUNNING"
    assert SearchDriver(second, second.now).tick() == 4  # the holder records them, goes on
    assert [t.state for t in second.search_trials("g-1")][:4] == ["DONE"] * 4
    first.close()
    second.close()
