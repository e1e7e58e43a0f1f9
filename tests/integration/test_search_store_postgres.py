"""Integration: the search driver's tests of tests/unit, collected again over a real PostgreSQL
server (tests/support/postgres.py): the searches' statements (migration 0006,
0006_searches.sql) are portable, and a controller that reopens the database resumes a search
without running a finished trial again."""

from __future__ import annotations

from pathlib import Path

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
from tunelab.controller.store.postgres import PostgresStore

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
    assert experiments[:4] == first and len(set(experiments)) == 8
    assert doc["best"]["params"] == OPTIMUM
