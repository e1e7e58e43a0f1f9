"""Integration: the watch driver's tests of tests/unit, collected again over a real PostgreSQL
server (tests/support/postgres.py): the watches' statements (migration 0008, 0008_watches.sql)
are portable; two controllers on one database queue an occurrence once; a write under a turn
that passed to another controller is fenced."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer
from tests.unit.controller import test_watch_driver as unit
from tests.unit.controller.test_watch_driver import Clock, add
from tunelab.controller.store import HostRow, StoreFenced
from tunelab.controller.store.postgres import PostgresStore
from tunelab.controller.store.watch_models import OccurrenceRow
from tunelab.controller.watches.driver import WatchDriver

globals().update((name, test) for name, test in vars(unit).items() if name.startswith("test_"))


@pytest.fixture
def store(postgres: PostgresServer, tmp_path: Path) -> PostgresStore:
    store = PostgresStore(postgres.new_database(), tmp_path / "secrets.json")
    store.add_host(HostRow(name="h1", address="h1:1"))
    return store


def test_two_controllers_on_one_database_queue_an_occurrence_once(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.new_database()
    stores = [PostgresStore(url, tmp_path / f"s{i}.json") for i in range(2)]
    clock = Clock(1000.0)
    add(stores[0], clock)  # type: ignore[arg-type]
    queued = [0, 0]
    start = threading.Barrier(2)

    def controller(i: int) -> None:
        driver = WatchDriver(stores[i], clock)
        start.wait()
        for _ in range(30):
            with stores[i].scheduling_pass() as turn:
                if turn is not None:
                    queued[i] += driver.tick(turn)

    threads = [threading.Thread(target=controller, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    occurrences = stores[1].watch_occurrences("nightly")
    assert sum(queued) == 1 and len(occurrences) == 1, queued
    assert len(stores[1].group_experiments(occurrences[0].group)) == 3
    for s in stores:
        s.close()


def test_an_occurrence_under_a_lost_turn_is_fenced(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.new_database()
    first, second = (PostgresStore(url, tmp_path / f"s{i}.json") for i in range(2))
    add(first, Clock(1000.0))  # type: ignore[arg-type]
    with first.scheduling_pass() as turn:
        assert turn is not None
        stale = turn
    with second.scheduling_pass() as taken:  # the turn passes to the other controller
        assert taken is not None
    with pytest.raises(StoreFenced):
        first.start_occurrence(
            OccurrenceRow("nightly", 1, "g-a", 1000.0, 1000.0), [], 1005.0, stale
        )
    assert first.watch_occurrences("nightly") == []
    watch = first.get_watch("nightly")
    assert watch is not None and watch.next_due == 1000.0
    first.close()
    second.close()
