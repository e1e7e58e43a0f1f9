"""A search step's unexpected error (here: a controller without Optuna asked to go on with a
TPE search another controller accepted) is logged and tried again with back-off; only a spec
error (a stored search no controller could run) ends the search. A real SQLite file."""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.unit.controller.test_search_driver import BASE, SEARCH, submit, with_hosts
from tunelab.controller.guard import StepBackoff
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.states import SearchState
from tunelab.controller.store import SqliteStore
from tunelab.controller.store.search_models import SearchRow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failures(logs: list[MutableMapping[str, Any]]) -> list[tuple[int, float]]:
    return [
        (e["failures"], e["retry_in_s"])
        for e in logs
        if e["event"] == "control_step_failed" and e["kind"] == "search"
    ]


def test_a_controller_without_optuna_retries_a_tpe_search_and_never_fails_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    submit(store, BASE + SEARCH.replace("STRATEGY", "tpe"))
    clock = Clock()
    driver = SearchDriver(store, clock)
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    with capture_logs() as logs:
        assert driver.tick() == 0
        assert driver.tick() == 0  # within its back-off: not tried again
        clock.now += 2
        assert driver.tick() == 0
        clock.now += 3.9
        assert driver.tick() == 0  # 4 s after the second failure, not 3.9
        clock.now += 0.1
        assert driver.tick() == 0
    assert failures(logs) == [(1, 2.0), (2, 4.0), (3, 8.0)]
    assert "Optuna" in next(e["error"] for e in logs if e["event"] == "control_step_failed")
    fault = store.step_faults("search")["g-1"]  # what `search show` says, one bounded line
    assert fault.failures == 3 and "Optuna" in fault.error and "\n" not in fault.error
    search = store.get_search("g-1")
    assert search is not None and search.state == "RUNNING"  # not failed for good
    monkeypatch.delitem(sys.modules, "optuna")  # Optuna installed here now
    clock.now += 8
    with capture_logs() as logs:
        assert driver.tick() > 0  # the search goes on
        clock.now += 20
        driver.tick()
    assert failures(logs) == []
    assert store.search_trials("g-1")
    assert store.step_faults("search") == {}  # the mark goes with the first step that passes


def test_a_stored_search_no_controller_can_run_ends_failed_with_its_reason(
    tmp_path: Path,
) -> None:
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    found = search_from_text(BASE + SEARCH.replace("STRATEGY", "grid"))
    assert found is not None
    spec = {**found.spec.to_dict(), "strategy": "annealing"}  # e.g. written by a newer version
    store.insert_search(SearchRow("g-1", "s", SearchState.RUNNING, spec, found.base, 0.0))
    with capture_logs() as logs:
        assert SearchDriver(store, Clock()).tick() == 0
    search = store.get_search("g-1")
    assert search is not None and search.state == "FAILED"
    assert "strategy 'annealing' is not one of" in search.message
    assert failures(logs) == []


def test_the_back_off_doubles_to_its_cap_and_a_success_forgets_it() -> None:
    backoff = StepBackoff(first=2.0, most=10.0)
    assert [backoff.failed("g", 0.0) for _ in range(4)] == [(1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0)]
    assert not backoff.due("g", 9.9) and backoff.due("g", 10.0)
    assert backoff.due("other", 0.0)
    backoff.succeeded("g")
    assert backoff.due("g", 0.0) and backoff.failed("g", 0.0) == (1, 2.0)
    backoff.keep_only(set())
    assert backoff.due("g", 0.0)
