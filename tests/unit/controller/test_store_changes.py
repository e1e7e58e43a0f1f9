"""Unit: the store's typed change records are checked at run time too, before anything is
written: a misspelt or mistyped field is a TypeError naming it, and the row is unchanged. A
real SQLite file (tmp_path). The same misspellings fail mypy (the writes take
``**fields: Unpack[...]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store import AttemptChange, ExperimentRow, HostRow, SqliteStore
from tunelab.controller.store.changes import AttemptFields, HostMove, checked


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    row = ExperimentRow("x-1", "g", "e", ExperimentState.QUEUED, {"host": {}})
    store.insert_experiments([row])
    store.create_attempt("x-1", "h1", [0], 1.0)
    return store


def untyped(**fields: Any) -> Any:
    """Fields as a caller that escaped the type checker would pass them."""
    return fields


def test_a_misspelt_attempt_field_writes_nothing(store: SqliteStore) -> None:
    with pytest.raises(TypeError, match="update_attempt: no field 'mesage'"):
        store.update_attempt("x-1-a1", **untyped(mesage="typo"))
    with pytest.raises(TypeError, match="finish_attempt: no field 'reslt'"):
        store.finish_attempt(
            "x-1-a1", AttemptState.SUCCEEDED, [AttemptState.DISPATCHING], **untyped(reslt={})
        )
    with pytest.raises(TypeError, match="change_attempts: no field 'acked'"):
        store.change_attempts(
            [
                AttemptChange("x-1-a1", {"message": "fine"}),
                AttemptChange("x-1-a1", untyped(acked=2.0)),
            ]
        )
    attempt = store.get_attempt("x-1-a1")
    assert attempt is not None and attempt.state is AttemptState.DISPATCHING
    assert attempt.message == "" and attempt.result is None  # not even the good change


def test_a_mistyped_field_is_refused_naming_it(store: SqliteStore) -> None:
    with pytest.raises(TypeError, match="field 'gpu_count' is str, expected <class 'int'>"):
        store.update_host("h1", **untyped(gpu_count="4"))
    with pytest.raises(TypeError, match="field 'finished_at' is str"):
        store.set_experiment_state(
            "x-1",
            ExperimentState.CANCELLED,
            [ExperimentState.RUNNING],
            **untyped(finished_at="now"),
        )
    host = store.get_host("h1")
    assert host is not None and host.gpu_count == 0
    experiment = store.get_experiment("x-1")
    assert experiment is not None and experiment.state is ExperimentState.RUNNING


def test_a_hosts_flags_move_only_with_its_state(store: SqliteStore) -> None:
    with pytest.raises(TypeError, match="via transition_host"):
        store.update_host("h1", **untyped(drain=True))
    seen = store.get_host("h1")
    assert seen is not None
    with pytest.raises(TypeError, match="transition_host: no field 'drained'"):
        store.transition_host("h1", seen, HostState.DRAINING, **untyped(drained=True))
    moved = store.transition_host("h1", seen, HostState.DRAINING, drain=True)
    assert moved.state is HostState.DRAINING and moved.drain


def test_the_check_knows_optional_enum_and_container_fields() -> None:
    good: AttemptFields = {
        "prev_state": AttemptState.READY,
        "unknown_since": 3,  # an int is a float here
        "result": None,
        "provenance": {"a": 1},
    }
    assert checked(good, AttemptFields, "w") is good
    with pytest.raises(TypeError, match="'prev_state' is str"):
        checked(untyped(prev_state="READY"), AttemptFields, "w")
    with pytest.raises(TypeError, match="'labels' is list"):
        checked(untyped(labels=["a"]), HostMove, "w")
    with pytest.raises(TypeError, match="'failures' is bool"):
        checked(untyped(failures=True), HostMove, "w")
