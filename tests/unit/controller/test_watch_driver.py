"""The watch driver over a real SQLite file (tmp_path) and a fake clock: an occurrence is queued
once per slot as an ordinary group, a missed stretch runs once, a paused watch queues nothing,
ended occurrences are judged in order against the baseline (first, previous, pinned), and the
verdict names what changed in the provenance.

Launches are "run" by this test: it places each queued experiment and ends it with a result
and provenance, as an agent would report them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import HostRow, SqliteStore, StoreConflict
from tunelab.controller.store.watch_models import (
    WATCH_ACTIVE,
    WATCH_PAUSED,
    OccurrenceRow,
    WatchRow,
)
from tunelab.controller.watches.document import watch_document
from tunelab.controller.watches.driver import WatchDriver
from tunelab.controller.watches.spec import watch_from_text

SPEC = """
name: nightly
server:
  command: [sim]
  flags: {--port: "{port}"}
  port: auto
  ready: {model: m}
benchmark: {requests: 10, input_len: 8, output_len: 8, concurrency: [8]}
watch:
  every: 5s
  launches: 3
  metrics: [output_throughput]
  margin: 2%
  baseline: BASELINE
"""


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    return store


def add(store: SqliteStore, clock: Clock, baseline: str = "first") -> WatchRow:
    return insert(store, clock, SPEC.replace("BASELINE", baseline))


def insert(store: SqliteStore, clock: Clock, text: str) -> WatchRow:
    """The watch of spec ``text``, added at ``clock.now`` (as AddWatch does)."""
    found = watch_from_text(text)
    assert found is not None
    row = WatchRow(
        found.name, found.spec.to_dict(), found.base_yaml, WATCH_ACTIVE, clock.now, clock.now,
        found.spec.pin,
    )  # fmt: skip
    store.insert_watch(row)
    return row


def run_queued(store: SqliteStore, throughput: float, version: str = "0.5.2") -> int:
    """Place and finish every queued experiment: launch k reports throughput * (1 + k/1000)."""
    queued = store.list_experiments([ExperimentState.QUEUED], limit=1000)
    for exp in queued:
        attempt = store.create_attempt(exp.id, "h1", [0], 1.0)
        value = throughput * (1 + exp.repeat_index / 1000)
        store.finish_attempt(
            attempt.id,
            AttemptState.SUCCEEDED,
            [AttemptState.DISPATCHING],
            result={"points": [{"concurrency": 8, "output_throughput": value}]},
            provenance={"engine": {"name": "sglang", "version": version}, "recorded_at": 1.0},
        )
    return len(queued)


def tick(store: SqliteStore, driver: WatchDriver) -> int:
    with store.scheduling_pass() as turn:
        assert turn is not None
        return driver.tick(turn)


def verdicts(store: SqliteStore) -> list[str | None]:
    return [(o.verdict or {}).get("verdict") for o in store.watch_occurrences("nightly")]


def test_one_occurrence_per_slot_and_a_missed_stretch_runs_once(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    driver = WatchDriver(store, clock)
    assert tick(store, driver) == 1  # the first occurrence runs at once
    assert tick(store, driver) == 0  # not again in the same slot
    occurrence = store.watch_occurrences("nightly")[0]
    experiments = store.group_experiments(occurrence.group)
    assert [e.name for e in experiments] == ["nightly#1", "nightly#2", "nightly#3"]
    assert all(e.state is ExperimentState.QUEUED for e in experiments)
    watch = store.get_watch("nightly")
    assert watch is not None and watch.next_due == 1005.0
    clock.now = 1004.0
    assert tick(store, driver) == 0
    clock.now = 1100.0  # 19 slots missed (a controller was down): one occurrence, not 19
    assert tick(store, driver) == 0  # ... once the one still running has its verdict
    run_queued(store, 1000.0)
    assert tick(store, driver) == 1
    assert tick(store, driver) == 0
    assert [o.number for o in store.watch_occurrences("nightly")] == [1, 2]
    watch = store.get_watch("nightly")
    assert watch is not None and watch.next_due == 1105.0


def test_a_paused_watch_queues_nothing_and_resumes(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    store.set_watch_state("nightly", WATCH_PAUSED)
    driver = WatchDriver(store, clock)
    assert tick(store, driver) == 0
    store.set_watch_state("nightly", WATCH_ACTIVE)
    assert tick(store, driver) == 1


def test_an_occurrence_is_queued_once_per_due_time(store: SqliteStore) -> None:
    """Two passes that read the same next_due (two controllers): the second queues nothing."""
    clock = Clock(1000.0)
    add(store, clock)
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.start_occurrence(OccurrenceRow("nightly", 1, "g-a", 1000.0, 1000.0), [], 1005.0, turn)
        with pytest.raises(StoreConflict):
            store.start_occurrence(
                OccurrenceRow("nightly", 2, "g-b", 1000.0, 1000.0), [], 1005.0, turn
            )
    assert [o.group for o in store.watch_occurrences("nightly")] == ["g-a"]


def test_verdicts_against_the_first_occurrence_name_the_changed_version(
    store: SqliteStore,
) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    seen: list[tuple[int, str]] = []
    driver = WatchDriver(
        store, clock, on_verdict=lambda w, o, v: seen.append((o.number, v["verdict"]))
    )
    tick(store, driver)
    assert run_queued(store, 1000.0) == 3
    tick(store, driver)
    assert verdicts(store) == ["baseline"]
    for speed in (1000.0, 1000.0):
        clock.now += 5.0
        tick(store, driver)
        run_queued(store, speed)
        tick(store, driver)
    assert verdicts(store) == ["baseline", "no change", "no change"]
    clock.now += 5.0
    tick(store, driver)
    run_queued(store, 800.0, version="0.5.3")  # the upgrade: 20 % slower
    tick(store, driver)
    assert verdicts(store) == ["baseline", "no change", "no change", "regression"]
    last = store.watch_occurrences("nightly")[-1].verdict
    assert last is not None and last["baseline"] == 1
    row = last["metrics"][0]
    assert row["metric"] == "output_throughput" and row["verdict"] == "regression"
    assert -21 < row["change_pct"] < -19
    assert {"field": "engine", "before": "sglang 0.5.2", "after": "sglang 0.5.3"} in last["changes"]
    assert last["values"]["output_throughput"] == pytest.approx([800.8, 801.6, 802.4])
    assert seen == [(1, "baseline"), (2, "no change"), (3, "no change"), (4, "regression")]
    watch = store.get_watch("nightly")
    assert watch is not None
    doc = watch_document(watch, store.watch_occurrences("nightly"), {})
    assert [o["index"] for o in doc["occurrences"]] == [1, 2, 3, 4]
    assert doc["last_verdict"] == "regression"


def test_previous_baseline_follows_the_last_occurrence(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock, baseline="previous")
    driver = WatchDriver(store, clock)
    for speed in (1000.0, 800.0, 800.0):
        tick(store, driver)
        run_queued(store, speed)
        tick(store, driver)
        clock.now += 5.0
    assert verdicts(store) == ["baseline", "regression", "no change"]
    baselines = [(o.verdict or {}).get("baseline") for o in store.watch_occurrences("nightly")]
    assert baselines == [None, 1, 2]


def test_a_pinned_baseline_waits_for_its_occurrence(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock, baseline="pinned 2")
    driver = WatchDriver(store, clock)
    for speed in (500.0, 1000.0, 1000.0):
        tick(store, driver)
        run_queued(store, speed)
        tick(store, driver)
        clock.now += 5.0
    assert verdicts(store) == ["undecided", "baseline", "no change"]


def test_an_occurrence_is_judged_only_when_all_its_launches_ended(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    driver = WatchDriver(store, clock)
    tick(store, driver)
    queued = store.list_experiments([ExperimentState.QUEUED], limit=10)
    attempt = store.create_attempt(queued[0].id, "h1", [0], 1.0)
    store.finish_attempt(
        attempt.id, AttemptState.FAILED_STARTUP, [AttemptState.DISPATCHING], failure_reason="X"
    )
    tick(store, driver)
    assert verdicts(store) == [None]
    run_queued(store, 1000.0)
    tick(store, driver)
    verdict = store.watch_occurrences("nightly")[0].verdict
    assert verdict is not None
    assert (verdict["verdict"], verdict["launches"], verdict["launches_total"]) == (
        "baseline",
        2,
        3,
    )


def test_removing_a_watch_keeps_its_experiments(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    tick(store, WatchDriver(store, clock))
    group = store.watch_occurrences("nightly")[0].group
    store.remove_watch("nightly")
    assert store.get_watch("nightly") is None and store.watch_occurrences("nightly") == []
    assert len(store.group_experiments(group)) == 3
    found = watch_from_text(SPEC.replace("BASELINE", "first"))
    assert found is not None  # the name is free again
    add(store, clock)
    assert store.list_watches()[0].name == "nightly"


def test_a_second_watch_with_the_same_name_is_refused(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    with pytest.raises(StoreConflict, match="exists"):
        add(store, clock)
