"""Unit: hosts as a state machine — the transition table, compare-and-set writes that a stale
read cannot win, and the one definition of a live attempt that SQL and Python share."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tunelab.controller import hoststate
from tunelab.controller.states import (
    ATTEMPT_LIVE,
    ATTEMPT_TERMINAL,
    AttemptState,
    HostState,
    TransitionError,
    check_host,
)
from tunelab.controller.store import HostRow, SqliteStore, StoreConflict
from tunelab.controller.store.schema import load_migrations

H = HostState
EXPECTED_HOST = {
    *((s, s) for s in H),
    (H.UNREACHABLE, H.READY), (H.UNREACHABLE, H.DRAINING), (H.UNREACHABLE, H.QUARANTINED),
    (H.READY, H.DRAINING), (H.DRAINING, H.READY), (H.READY, H.UNREACHABLE),
    (H.DRAINING, H.UNREACHABLE), (H.READY, H.QUARANTINED), (H.DRAINING, H.QUARANTINED),
    (H.QUARANTINED, H.READY), (H.QUARANTINED, H.DRAINING),
}  # fmt: skip


@pytest.mark.parametrize(("current", "target"), list(itertools.product(H, H)))
def test_every_host_pair(current: HostState, target: HostState) -> None:
    if (current, target) in EXPECTED_HOST:
        check_host(current, target)
    else:
        with pytest.raises(TransitionError):
            check_host(current, target)


def test_live_is_one_definition_in_python_and_in_the_schema() -> None:
    assert set(ATTEMPT_LIVE) == set(AttemptState) - ATTEMPT_TERMINAL
    schema = "\n".join(m.sql for m in load_migrations())
    *_, index = re.finditer(r"one_live_attempt.*?NOT IN \(([^)]*)\)", schema, re.S)  # the latest
    assert {s.strip(" '\n") for s in index.group(1).split(",")} == {
        s.value for s in ATTEMPT_TERMINAL
    }


class Interleaved:
    """The real store, with another writer slipping in right after the next read of a host."""

    def __init__(self, store: SqliteStore, between: Callable[[], object]) -> None:
        self._store = store
        self._between: Callable[[], object] | None = between

    def get_host(self, name: str) -> HostRow | None:
        row = self._store.get_host(name)
        if self._between is not None:
            between, self._between = self._between, None
            between()
        return row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    hoststate.change_host(store, "h1", hoststate.answered({"gpu_count": 8}, 1.0))
    return store


def test_a_drain_never_undoes_a_quarantine_set_meanwhile(store: SqliteStore) -> None:
    def quarantine() -> None:
        hoststate.change_host(store, "h1", hoststate.quarantine("a process survived"))

    racing = Interleaved(store, quarantine)
    hoststate.change_host(racing, "h1", hoststate.drain(False, clear_quarantine=False))
    host = store.get_host("h1")
    assert host is not None and host.state is H.QUARANTINED and host.quarantined
    assert host.state_reason == "a process survived"
    # lifting it takes a person saying so
    hoststate.change_host(store, "h1", hoststate.drain(False, clear_quarantine=True))
    host = store.get_host("h1")
    assert host is not None and host.state is H.READY and not host.quarantined


def test_a_slow_poll_answer_never_undoes_a_drain(store: SqliteStore) -> None:
    def drain() -> None:
        hoststate.change_host(store, "h1", hoststate.drain(True, clear_quarantine=False))

    racing = Interleaved(store, drain)
    hoststate.change_host(racing, "h1", hoststate.answered({"gpu_count": 8}, 2.0))
    host = store.get_host("h1")
    assert host is not None and host.state is H.DRAINING and host.drain and host.last_seen == 2.0


def test_a_stale_compare_and_set_is_refused_and_state_fields_need_it(store: SqliteStore) -> None:
    seen = store.get_host("h1")
    assert seen is not None
    store.transition_host("h1", seen, H.DRAINING, drain=True)
    with pytest.raises(StoreConflict):
        store.transition_host("h1", seen, H.UNREACHABLE)  # read before the drain
    with pytest.raises(TypeError):
        # the type checker refuses the field as well; this is the run-time half
        store.update_host("h1", state=H.READY)  # type: ignore[call-arg]
    hoststate.change_host(store, "h1", hoststate.quarantine("survivor"))
    quarantined = store.get_host("h1")
    assert quarantined is not None and quarantined.state is H.QUARANTINED
    with pytest.raises(TransitionError):
        store.transition_host("h1", quarantined, H.UNREACHABLE)  # only a person lifts it


def test_failed_polls_make_a_host_unreachable_but_never_a_quarantined_one(
    store: SqliteStore,
) -> None:
    for _ in range(2):
        hoststate.change_host(store, "h1", hoststate.poll_failed("refused", 3))
    assert store.get_host("h1").state is H.READY  # type: ignore[union-attr]
    hoststate.change_host(store, "h1", hoststate.poll_failed("refused", 3))
    host = store.get_host("h1")
    assert (
        host is not None and host.state is H.UNREACHABLE and "3 failed polls" in host.state_reason
    )
    hoststate.change_host(store, "h1", hoststate.quarantine("survivor"))
    hoststate.change_host(store, "h1", hoststate.poll_failed("refused", 3))
    assert store.get_host("h1").state is H.QUARANTINED  # type: ignore[union-attr]
    events = [(e["from_state"], e["to_state"]) for e in store.events_for("h1")]
    assert events[-2:] == [("READY", "UNREACHABLE"), ("UNREACHABLE", "QUARANTINED")]
