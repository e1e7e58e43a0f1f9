"""The server state machine as data: states, which are terminal, and every allowed transition."""

from __future__ import annotations

from enum import StrEnum


class ServerState(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    LOADING = "LOADING"
    READY = "READY"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    KILL_FAILED = "KILL_FAILED"

    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    def is_live(self) -> bool:
        """A process may exist and may hold the port and GPUs."""
        return not self.is_terminal()


TERMINAL_STATES = frozenset({ServerState.STOPPED, ServerState.FAILED, ServerState.KILL_FAILED})

S = ServerState
ALLOWED_TRANSITIONS: frozenset[tuple[ServerState, ServerState]] = frozenset(
    {
        (S.PENDING, S.STARTING),
        (S.PENDING, S.FAILED),  # spawn failed (argv[0] not found, cwd missing)
        (S.PENDING, S.STOPPED),  # stopped before it was spawned
        (S.STARTING, S.LOADING),
        (S.STARTING, S.READY),  # no progress lines before the probe answered
        (S.STARTING, S.FAILED),
        (S.STARTING, S.STOPPING),
        (S.LOADING, S.READY),
        (S.LOADING, S.FAILED),
        (S.LOADING, S.STOPPING),
        (S.READY, S.FAILED),  # died after READY
        (S.READY, S.STOPPING),
        (S.STOPPING, S.STOPPED),
        (S.STOPPING, S.FAILED),  # stopped because it failed (startup timeout)
        (S.STOPPING, S.KILL_FAILED),
    }
)


class TransitionError(RuntimeError):
    """A transition outside ALLOWED_TRANSITIONS: a bug in the caller, never user input."""


def check_transition(current: ServerState, target: ServerState) -> None:
    if (current, target) not in ALLOWED_TRANSITIONS:
        raise TransitionError(f"server state {current} -> {target} is not allowed")
