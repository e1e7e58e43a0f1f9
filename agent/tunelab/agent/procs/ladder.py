"""The stop ladder as a pure state machine over (tree, clock): SIGTERM to the tree, a grace,
SIGKILL to what is left (again every ``KILL_REPEAT``), and ``kill_failed`` once something has
outlived ``kill_timeout`` after the first SIGKILL.

Standard library only and free of effects: :func:`step` takes the ladder, the tree as the monitor
just walked it (pid → create time) and the monotonic time, and returns the next ladder and the
signals to send. The monitor does scan → :func:`step` → ``identity.signal_exact`` for each
signal, so each process is still verified (pid + create time) at the moment it is signalled.

The rules that five earlier fixes were about (each a row of tests/unit/agent/test_ladder.py):

- an empty walk is DONE, but DONE is not a way past the grace: a later walk that finds more
  (the first raced an exit) resumes the ladder where it stood, at TERM within the grace;
- a process first seen during the grace gets its own SIGTERM then, and one already termed is
  not signalled again (it may be shutting down cleanly);
- the ladder looks only at the tree, not at the leader: a zombie leader whose other threads
  still hold children leaves a non-empty tree, and the ladder goes on;
- SIGKILL is sent to the whole tree again every ``KILL_REPEAT`` (a process may fork meanwhile);
- ``kill_failed`` is set once the tree outlives ``kill_timeout`` after escalation, and cleared
  by an empty walk.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping
from dataclasses import dataclass, replace

KILL_REPEAT = 0.5
LEFTOVERS_REASON = "leftovers of an exited server"
LEFTOVERS_KILL_TIMEOUT = 10.0


class Phase(enum.Enum):
    TERM = "TERM"  # SIGTERM sent, grace running
    KILL = "KILL"  # grace over: SIGKILL, repeated
    DONE = "DONE"  # the last walk was empty


@dataclass(frozen=True)
class Signal:
    pid: int
    create_time: float
    sig: signal.Signals


@dataclass(frozen=True)
class Ladder:
    """One stop in progress. ``requested_at``, ``killed_at``, ``last_kill``: monotonic seconds."""

    grace: float
    kill_timeout: float
    reason: str
    requested_at: float
    phase: Phase = Phase.TERM
    killed_at: float = 0.0
    last_kill: float | None = None
    escalated: bool = False
    kill_failed: bool = False
    termed: frozenset[tuple[int, float]] = frozenset()  # had their SIGTERM

    @property
    def for_leftovers(self) -> bool:
        """Started because the server exited by itself, not by a stop request."""
        return self.reason == LEFTOVERS_REASON


Tree = Mapping[int, float]


def begin(
    grace: float, kill_timeout: float, reason: str, tree: Tree, now: float
) -> tuple[Ladder, tuple[Signal, ...]]:
    """A stop requested at ``now``: SIGTERM to every process of ``tree``, even with no grace."""
    return _term(Ladder(max(0.0, grace), max(0.0, kill_timeout), reason, now), tree)


def for_leftovers(now: float) -> Ladder:
    """What a server that exited on its own left behind: no grace, no SIGTERM; the first
    :func:`step` sends SIGKILL."""
    return Ladder(0.0, LEFTOVERS_KILL_TIMEOUT, LEFTOVERS_REASON, now)


def step(ladder: Ladder, tree: Tree, now: float) -> tuple[Ladder, tuple[Signal, ...]]:
    """The next ladder and the signals to send, given the tree as walked at ``now``."""
    if not tree:
        return replace(ladder, phase=Phase.DONE, kill_failed=False), ()
    if ladder.phase is Phase.DONE:  # the empty walk raced an exit: resume where it stood
        ladder = replace(ladder, phase=Phase.KILL if ladder.escalated else Phase.TERM)
    if ladder.phase is Phase.TERM:
        if now - ladder.requested_at < ladder.grace:
            return _term(ladder, tree)
        ladder = replace(ladder, phase=Phase.KILL, killed_at=now, escalated=True)
    if ladder.last_kill is not None and now - ladder.last_kill < KILL_REPEAT:
        return ladder, ()
    kills = tuple(Signal(pid, ct, signal.SIGKILL) for pid, ct in sorted(tree.items()))
    failed = now - ladder.killed_at > ladder.kill_timeout
    return replace(ladder, last_kill=now, kill_failed=failed), kills


def _term(ladder: Ladder, tree: Tree) -> tuple[Ladder, tuple[Signal, ...]]:
    """SIGTERM once to each process of the tree that has not had one."""
    fresh = sorted((pid, ct) for pid, ct in tree.items() if (pid, ct) not in ladder.termed)
    if not fresh:
        return ladder, ()
    termed = ladder.termed | frozenset(fresh)
    return replace(ladder, termed=termed), tuple(
        Signal(pid, ct, signal.SIGTERM) for pid, ct in fresh
    )
