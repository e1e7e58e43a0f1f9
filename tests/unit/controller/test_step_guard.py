"""Issue 45.1: one watch (or search, or pool) must never stop the control loop. The guard over a
real SQLite file and a fake clock: a step that raises marks its object (one bounded line, a
counter), backs off and never reaches the tick; the database being away or the turn lost still
does; at most ``max_steps`` objects a tick, round-robin. Then the three triggers of the issue
through the watch driver: a server's 10**200 tokens, a checkpoint's 10**400-byte tensor, a
margin of 1e-300 (stored by a controller that accepted it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.unit.controller.test_watch_driver import Clock, add, run_queued, tick, verdicts
from tunelab.controller.guard import ERROR_CHARS, StepGuard, error_line
from tunelab.controller.spec.limits import SpecLimits
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.store.base import StoreFenced, StoreUnavailable
from tunelab.controller.watches.driver import WatchDriver


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    return store


def boom(name: str) -> int:
    raise OverflowError((34, "Numerical result out of range\n" + "\x1b]52;c;aGk=\x07" * 300))


def test_a_failing_step_marks_its_object_and_backs_off_never_the_tick(
    store: SqliteStore,
) -> None:
    clock = Clock(1000.0)
    guard = StepGuard(store, "watch", clock)
    stepped: list[str] = []

    def step(name: str) -> int:
        if name == "bad":
            boom(name)
        stepped.append(name)
        return 1

    with capture_logs() as logs:
        assert guard.each(["bad", "good"], step) == 1
        assert guard.each(["bad", "good"], step) == 1  # "bad" waits out its back-off
        clock.now += 2.0
        assert guard.each(["bad", "good"], step) == 1
    assert stepped == ["good"] * 3
    failed = [e for e in logs if e["event"] == "control_step_failed"]
    assert [(e["name"], e["failures"], e["retry_in_s"]) for e in failed] == [
        ("bad", 1, 2.0),
        ("bad", 2, 4.0),
    ]
    line = failed[0]["error"]
    assert line.startswith("OverflowError: ") and "in boom)" in line
    assert len(line) <= ERROR_CHARS and "\n" not in line and "\x1b" not in line
    assert "exc_info" not in failed[0]  # no traceback at error level: 3 KB a tick before
    fault = store.step_faults("watch")["bad"]
    assert (fault.failures, fault.error, fault.first_at) == (2, line, 1000.0)
    assert fault.shown()["failures"] == 2
    assert guard.failed_steps == 2
    clock.now += 4.0
    with capture_logs() as logs:
        assert guard.each(["bad", "good"], lambda name: 1) == 2  # fixed: the mark goes
    assert store.step_faults("watch") == {}
    assert [e["event"] for e in logs] == ["control_step_recovered"]


def test_a_lost_turn_or_an_absent_database_is_the_ticks(store: SqliteStore) -> None:
    guard = StepGuard(store, "search", Clock(0.0))
    for error in (StoreFenced("turn lost"), StoreUnavailable("read-only")):

        def step(name: str, error: Exception = error) -> int:
            raise error

        with pytest.raises(type(error)):
            guard.each(["g-1"], step)
    assert store.step_faults("search") == {}


def test_at_most_max_steps_a_tick_round_robin_and_none_starved(store: SqliteStore) -> None:
    guard = StepGuard(store, "watch", Clock(0.0), max_steps=4)
    names = [f"w{i:02d}" for i in range(10)]
    seen: list[str] = []

    def step(name: str) -> int:
        seen.append(name)
        return 1

    for _ in range(5):
        assert guard.each(names, step) == 4
    assert seen == names + names  # 4 a tick, each in turn: w00-w03, w04-w07, w08 w09 w00 w01...


def test_a_mark_left_by_an_earlier_process_goes_once_its_object_passes(
    store: SqliteStore,
) -> None:
    store.note_step_fault("watch", "nightly", "KeyError: 'margin'", 5.0)
    store.note_step_fault("watch", "removed", "KeyError: 'margin'", 5.0)
    StepGuard(store, "watch", Clock(10.0)).each(["nightly"], lambda name: 0)
    assert store.step_faults("watch") == {}


def test_error_line_is_one_short_line() -> None:
    try:
        raise ValueError("x" * 5000)
    except ValueError as exc:
        line = error_line(exc)
    assert len(line) <= ERROR_CHARS and line.startswith("ValueError: xxx")


# --- the triggers, through the watch driver -------------------------------------------


def finish_queued(store: SqliteStore, value: float | int, provenance: dict[str, object]) -> None:
    for exp in store.list_experiments([ExperimentState.QUEUED], limit=1000):
        attempt = store.create_attempt(exp.id, "h1", [0], 1.0)
        store.finish_attempt(
            attempt.id,
            AttemptState.SUCCEEDED,
            [AttemptState.DISPATCHING],
            result={"points": [{"concurrency": 8, "output_throughput": value}]},
            provenance=provenance,
        )


def two_occurrences(store: SqliteStore, driver: WatchDriver, clock: Clock) -> None:
    tick(store, driver)
    run_queued(store, 1000.0)
    tick(store, driver)
    clock.now += 5.0
    tick(store, driver)  # the second occurrence: the caller ends it


@pytest.mark.parametrize(
    ("value", "provenance"),
    [
        (10**200, {"engine": {"version": "1"}}),  # tokens/s from a server's 10**200 tokens
        (900.0, {"model": {"weight_bytes": 10**400, "path": "/m"}}),  # a broken header
    ],
    ids=["usage-10e200", "header-10e400"],
)
def test_a_server_or_checkpoint_out_of_range_gets_a_verdict_not_a_failed_tick(
    store: SqliteStore, value: float | int, provenance: dict[str, object]
) -> None:
    clock = Clock(1000.0)
    add(store, clock)
    driver = WatchDriver(store, clock)
    two_occurrences(store, driver, clock)
    finish_queued(store, value, provenance)
    with capture_logs() as logs:
        tick(store, driver)
    assert [e for e in logs if e["event"] == "control_step_failed"] == []
    assert verdicts(store)[:2] == ["baseline", verdicts(store)[1]]
    assert verdicts(store)[1] is not None and store.step_faults("watch") == {}


def test_a_margin_of_1e_300_stored_by_an_older_controller_is_judged(
    store: SqliteStore,
) -> None:
    clock = Clock(1000.0)
    row = add(store, clock)
    store.remove_watch(row.name)
    store.insert_watch(dataclasses.replace(row, spec={**row.spec, "margin": 1e-300}))
    driver = WatchDriver(store, clock)
    two_occurrences(store, driver, clock)
    run_queued(store, 1000.0)  # the same again: undecided, and how many launches would decide
    with capture_logs() as logs:
        tick(store, driver)
    assert [e for e in logs if e["event"] == "control_step_failed"] == []
    assert verdicts(store)[1] is not None


def test_a_watch_whose_step_fails_is_marked_and_the_other_watches_go_on(
    store: SqliteStore,
) -> None:
    clock = Clock(1000.0)
    row = add(store, clock)
    broken = dataclasses.replace(row, name="broken", spec={**row.spec, "launches": "three"})
    store.insert_watch(broken)  # written by another version: its spec cannot be read
    driver = WatchDriver(store, clock)
    with capture_logs():
        assert tick(store, driver) == 1  # nightly's first occurrence: queued
    assert [o.watch for o in store.watch_occurrences("nightly")] == ["nightly"]
    fault = store.step_faults("watch")["broken"]
    assert fault.failures == 1 and fault.error.startswith("ValueError: invalid literal for int()")


def test_a_watch_the_controllers_limits_now_refuse_is_marked_with_the_reason(
    store: SqliteStore,
) -> None:
    """Its 3 launches are 3 variants; a controller restarted with max_variants 1 cannot queue
    it: said in `watch show` (it was a log line only, once)."""
    clock = Clock(1000.0)
    add(store, clock)
    driver = WatchDriver(store, clock, limits=SpecLimits(max_variants=1))
    with capture_logs():
        assert tick(store, driver) == 0
    fault = store.step_faults("watch")["nightly"]
    assert fault.error.startswith("SpecError: ") and "variants" in fault.error, fault
