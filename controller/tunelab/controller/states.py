"""Experiment, attempt, host, search and trial state machines as data: states, terminal sets,
allowed moves."""

from __future__ import annotations

from enum import StrEnum


class ExperimentState(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self in EXPERIMENT_TERMINAL


class AttemptState(StrEnum):
    DISPATCHING = "DISPATCHING"
    STARTING = "STARTING"
    READY = "READY"
    BENCHMARKING = "BENCHMARKING"
    UNKNOWN = "UNKNOWN"
    SUCCEEDED = "SUCCEEDED"
    FAILED_STARTUP = "FAILED_STARTUP"
    FAILED_BENCHMARK = "FAILED_BENCHMARK"
    CANCELLED = "CANCELLED"
    LOST = "LOST"
    TIMED_OUT = "TIMED_OUT"

    def is_terminal(self) -> bool:
        return self in ATTEMPT_TERMINAL

    def is_active(self) -> bool:
        return not self.is_terminal()


class HostState(StrEnum):
    READY = "READY"
    DRAINING = "DRAINING"
    UNREACHABLE = "UNREACHABLE"
    QUARANTINED = "QUARANTINED"

    def takes_work(self) -> bool:
        """The scheduler places runs only on READY hosts (drain and quarantine are not READY)."""
        return self is HostState.READY


class SearchState(StrEnum):
    """A search: RUNNING until it ends DONE (some trial met the SLOs), FAILED or CANCELLED."""

    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self is not SearchState.RUNNING


class TrialState(StrEnum):
    """A search's trial: RUNNING (its experiment queued or running) until DONE, FAILED or
    CANCELLED, or born SKIPPED (implied by another's OOM, or a bad argument)."""

    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    CANCELLED = "CANCELLED"

    def is_terminal(self) -> bool:
        return self is not TrialState.RUNNING


EXPERIMENT_TERMINAL = frozenset(
    {ExperimentState.SUCCEEDED, ExperimentState.FAILED, ExperimentState.CANCELLED}
)
ATTEMPT_TERMINAL = frozenset(
    {
        AttemptState.SUCCEEDED,
        AttemptState.FAILED_STARTUP,
        AttemptState.FAILED_BENCHMARK,
        AttemptState.CANCELLED,
        AttemptState.LOST,
        AttemptState.TIMED_OUT,
    }
)

# "Live" = not terminal: the one definition that Python (the driver) and SQL (the store's
# queries, and schema.sql's one_live_attempt index, checked by a unit test) both use.
ATTEMPT_LIVE: tuple[AttemptState, ...] = tuple(s for s in AttemptState if s not in ATTEMPT_TERMINAL)


E = ExperimentState
EXPERIMENT_TRANSITIONS: frozenset[tuple[ExperimentState, ExperimentState]] = frozenset(
    {
        (E.QUEUED, E.RUNNING),
        (E.QUEUED, E.CANCELLED),
        (E.QUEUED, E.FAILED),  # e.g. no host could ever match (host removed)
        (E.RUNNING, E.QUEUED),  # the attempt was LOST: queued again for a retry
        (E.RUNNING, E.SUCCEEDED),
        (E.RUNNING, E.FAILED),
        (E.RUNNING, E.CANCELLED),
    }
)

A = AttemptState
_LIVE = (A.DISPATCHING, A.STARTING, A.READY, A.BENCHMARKING)  # live and answering (not UNKNOWN)
_PROGRESS = {(A.DISPATCHING, A.STARTING), (A.STARTING, A.READY), (A.READY, A.BENCHMARKING)}
_SKIPS = {  # a poll can miss short states
    (A.DISPATCHING, A.READY),
    (A.DISPATCHING, A.BENCHMARKING),
    (A.STARTING, A.BENCHMARKING),
}
_TO_UNKNOWN = {(s, A.UNKNOWN) for s in _LIVE}
_FROM_UNKNOWN = {(A.UNKNOWN, s) for s in _LIVE}  # the agent answers again: back to what it says
_ENDINGS = {
    (s, end)
    for s in (*_LIVE, A.UNKNOWN)
    for end in (
        A.SUCCEEDED,
        A.FAILED_STARTUP,
        A.FAILED_BENCHMARK,
        A.CANCELLED,
        A.LOST,
        A.TIMED_OUT,
    )
}
ATTEMPT_TRANSITIONS: frozenset[tuple[AttemptState, AttemptState]] = frozenset(
    _PROGRESS | _SKIPS | _TO_UNKNOWN | _FROM_UNKNOWN | _ENDINGS
)


H = HostState
# A host moves on what its agent says (or does not), and on what a person decides; quarantine
# (a process that survived a stop) is lifted only by a person, never by an answer.
HOST_TRANSITIONS: frozenset[tuple[HostState, HostState]] = frozenset(
    {(s, s) for s in HostState}  # fields change, the state stays (a poll's observations)
    | {
        (H.UNREACHABLE, H.READY),  # the agent answers
        (H.UNREACHABLE, H.DRAINING),  # ... and a person had drained it
        (H.READY, H.DRAINING),  # a person drains it
        (H.DRAINING, H.READY),  # ... and undrains it
        (H.READY, H.UNREACHABLE),  # polls failed
        (H.DRAINING, H.UNREACHABLE),
        (H.READY, H.QUARANTINED),  # a process survived the stop ladder
        (H.DRAINING, H.QUARANTINED),
        (H.UNREACHABLE, H.QUARANTINED),
        (H.QUARANTINED, H.READY),  # a person lifts the quarantine
        (H.QUARANTINED, H.DRAINING),
    }
)


S = SearchState
SEARCH_TRANSITIONS: frozenset[tuple[SearchState, SearchState]] = frozenset(
    {(S.RUNNING, S.DONE), (S.RUNNING, S.FAILED), (S.RUNNING, S.CANCELLED)}
)
T = TrialState
# SKIPPED is a state a trial is born in, never moved to
TRIAL_TRANSITIONS: frozenset[tuple[TrialState, TrialState]] = frozenset(
    {(T.RUNNING, T.DONE), (T.RUNNING, T.FAILED), (T.RUNNING, T.CANCELLED)}
)


def settled_host_state(drain: bool, quarantined: bool) -> HostState:
    """The state of a host that answers: a person's quarantine, then drain, win over READY."""
    if quarantined:
        return HostState.QUARANTINED
    return HostState.DRAINING if drain else HostState.READY


class TransitionError(RuntimeError):
    """A move outside the tables: a bug in the caller, never user input."""


def check_experiment(current: ExperimentState, target: ExperimentState) -> None:
    if (current, target) not in EXPERIMENT_TRANSITIONS:
        raise TransitionError(f"experiment {current} -> {target} is not allowed")


def check_attempt(current: AttemptState, target: AttemptState) -> None:
    if (current, target) not in ATTEMPT_TRANSITIONS:
        raise TransitionError(f"attempt {current} -> {target} is not allowed")


def check_host(current: HostState, target: HostState) -> None:
    if (current, target) not in HOST_TRANSITIONS:
        raise TransitionError(f"host {current} -> {target} is not allowed")


def check_search(current: SearchState, target: SearchState) -> None:
    if (current, target) not in SEARCH_TRANSITIONS:
        raise TransitionError(f"search {current} -> {target} is not allowed")


def check_trial(current: TrialState, target: TrialState) -> None:
    if (current, target) not in TRIAL_TRANSITIONS:
        raise TransitionError(f"trial {current} -> {target} is not allowed")


def experiment_outcome(attempt: AttemptState) -> ExperimentState | None:
    """What a terminal attempt means for its experiment; None = queue it again (LOST)."""
    return {
        A.SUCCEEDED: E.SUCCEEDED,
        A.FAILED_STARTUP: E.FAILED,
        A.FAILED_BENCHMARK: E.FAILED,
        A.TIMED_OUT: E.FAILED,
        A.CANCELLED: E.CANCELLED,
        A.LOST: None,
    }.get(attempt)
