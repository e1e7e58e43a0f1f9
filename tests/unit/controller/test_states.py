"""Unit: experiment, attempt, search and trial state machines — every allowed and forbidden
transition."""

from __future__ import annotations

import itertools
import json

import pytest

from tunelab.controller.states import (
    ATTEMPT_TERMINAL,
    ATTEMPT_TRANSITIONS,
    EXPERIMENT_TRANSITIONS,
    SEARCH_TRANSITIONS,
    TRIAL_TRANSITIONS,
    AttemptState,
    ExperimentState,
    SearchState,
    TransitionError,
    TrialState,
    check_attempt,
    check_experiment,
    check_search,
    check_trial,
    experiment_outcome,
)

A = AttemptState
E = ExperimentState
LIVE = [A.DISPATCHING, A.STARTING, A.READY, A.BENCHMARKING]
ENDS = [A.SUCCEEDED, A.FAILED_STARTUP, A.FAILED_BENCHMARK, A.CANCELLED, A.LOST, A.TIMED_OUT]
EXPECTED_ATTEMPT = {
    (A.DISPATCHING, A.STARTING), (A.STARTING, A.READY), (A.READY, A.BENCHMARKING),
    (A.DISPATCHING, A.READY), (A.DISPATCHING, A.BENCHMARKING), (A.STARTING, A.BENCHMARKING),
    *((s, A.UNKNOWN) for s in LIVE), *((A.UNKNOWN, s) for s in LIVE),
    *((s, end) for s in [*LIVE, A.UNKNOWN] for end in ENDS),
}  # fmt: skip
EXPECTED_EXPERIMENT = {
    (E.QUEUED, E.RUNNING), (E.QUEUED, E.CANCELLED), (E.QUEUED, E.FAILED), (E.RUNNING, E.QUEUED),
    (E.RUNNING, E.SUCCEEDED), (E.RUNNING, E.FAILED), (E.RUNNING, E.CANCELLED),
}  # fmt: skip


@pytest.mark.parametrize(("current", "target"), list(itertools.product(A, A)))
def test_every_attempt_pair(current: AttemptState, target: AttemptState) -> None:
    if (current, target) in EXPECTED_ATTEMPT:
        check_attempt(current, target)
    else:
        with pytest.raises(TransitionError):
            check_attempt(current, target)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(E, E)))
def test_every_experiment_pair(current: ExperimentState, target: ExperimentState) -> None:
    if (current, target) in EXPECTED_EXPERIMENT:
        check_experiment(current, target)
    else:
        with pytest.raises(TransitionError):
            check_experiment(current, target)


def test_tables_and_terminal_rules() -> None:
    assert ATTEMPT_TRANSITIONS == EXPECTED_ATTEMPT
    assert EXPERIMENT_TRANSITIONS == EXPECTED_EXPERIMENT
    assert not any(src in ATTEMPT_TERMINAL for src, _ in ATTEMPT_TRANSITIONS)
    assert A.UNKNOWN not in ATTEMPT_TERMINAL  # an agent that does not answer ends nothing
    # only LOST (infrastructure) sends an experiment back to the queue
    assert [s for s in ENDS if experiment_outcome(s) is None] == [A.LOST]
    assert experiment_outcome(A.FAILED_BENCHMARK) is E.FAILED


@pytest.mark.parametrize(("current", "target"), list(itertools.product(SearchState, SearchState)))
def test_every_search_pair(current: SearchState, target: SearchState) -> None:
    allowed = current is SearchState.RUNNING and target.is_terminal()
    assert ((current, target) in SEARCH_TRANSITIONS) is allowed
    if allowed:
        check_search(current, target)
    else:
        with pytest.raises(TransitionError):
            check_search(current, target)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(TrialState, TrialState)))
def test_every_trial_pair(current: TrialState, target: TrialState) -> None:
    """A trial ends once, from RUNNING; SKIPPED is a state it is born in, never moved to."""
    ends = {TrialState.DONE, TrialState.FAILED, TrialState.CANCELLED}
    allowed = current is TrialState.RUNNING and target in ends
    assert ((current, target) in TRIAL_TRANSITIONS) is allowed
    if allowed:
        check_trial(current, target)
    else:
        with pytest.raises(TransitionError):
            check_trial(current, target)


def test_search_states_keep_the_stored_and_shown_strings() -> None:
    assert [s.value for s in SearchState] == ["RUNNING", "DONE", "FAILED", "CANCELLED"]
    assert [t.value for t in TrialState] == ["RUNNING", "DONE", "FAILED", "SKIPPED", "CANCELLED"]
    assert json.dumps({"state": TrialState.SKIPPED}) == '{"state": "SKIPPED"}'
