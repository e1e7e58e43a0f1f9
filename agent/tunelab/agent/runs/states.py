"""The run state machine as data."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    READY = "READY"
    BENCHMARKING = "BENCHMARKING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED_STARTUP = "FAILED_STARTUP"
    FAILED_BENCHMARK = "FAILED_BENCHMARK"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"

    def is_terminal(self) -> bool:
        return self in RUN_TERMINAL


RUN_TERMINAL = frozenset(
    {
        RunState.SUCCEEDED,
        RunState.FAILED_STARTUP,
        RunState.FAILED_BENCHMARK,
        RunState.CANCELLED,
        RunState.TIMED_OUT,
    }
)
R = RunState
_ENDS = (R.FAILED_STARTUP, R.FAILED_BENCHMARK, R.CANCELLED, R.TIMED_OUT)
RUN_TRANSITIONS: frozenset[tuple[RunState, RunState]] = frozenset(
    {
        (R.PENDING, R.STARTING),
        (R.PENDING, R.READY),  # an existing READY server is used
        (R.STARTING, R.READY),
        (R.READY, R.BENCHMARKING),
        (R.BENCHMARKING, R.STOPPING),
        (R.STOPPING, R.SUCCEEDED),
        *(
            (s, end)
            for s in (R.PENDING, R.STARTING, R.READY, R.BENCHMARKING, R.STOPPING)
            for end in _ENDS
        ),
        *((s, R.STOPPING) for s in (R.STARTING, R.READY)),  # cancel / timeout: stop first
    }
)


class RunTransitionError(RuntimeError):
    pass


def check_run_transition(current: RunState, target: RunState) -> None:
    if (current, target) not in RUN_TRANSITIONS:
        raise RunTransitionError(f"run state {current} -> {target} is not allowed")
