"""Unit: the server state machine — every allowed and every forbidden transition."""

from __future__ import annotations

import itertools

import pytest

from tunelab.agent.servers.states import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    ServerState,
    TransitionError,
    check_transition,
)

S = ServerState
EXPECTED_ALLOWED = {
    (S.PENDING, S.STARTING), (S.PENDING, S.FAILED), (S.PENDING, S.STOPPED),
    (S.STARTING, S.LOADING), (S.STARTING, S.READY),
    (S.STARTING, S.FAILED), (S.STARTING, S.STOPPING),
    (S.LOADING, S.READY), (S.LOADING, S.FAILED), (S.LOADING, S.STOPPING),
    (S.READY, S.FAILED), (S.READY, S.STOPPING),
    (S.STOPPING, S.STOPPED), (S.STOPPING, S.FAILED), (S.STOPPING, S.KILL_FAILED),
}  # fmt: skip


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_every_pair(current: ServerState, target: ServerState) -> None:
    if (current, target) in EXPECTED_ALLOWED:
        check_transition(current, target)
    else:
        with pytest.raises(TransitionError):
            check_transition(current, target)


def test_table_matches_and_terminal_states_are_final() -> None:
    assert ALLOWED_TRANSITIONS == EXPECTED_ALLOWED
    assert (
        {s for s in S if s.is_terminal()} == TERMINAL_STATES == {S.STOPPED, S.FAILED, S.KILL_FAILED}
    )
    assert not any(current in TERMINAL_STATES for current, _ in ALLOWED_TRANSITIONS)
