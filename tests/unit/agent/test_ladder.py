"""The stop ladder as a table: each row is a sequence of (time, tree walked) with the signals the
ladder must send at that step and the phase it must be in after it. A fake clock (the times in
the rows) and made-up trees: no process, no sleep.

The rows are the races that five fixes to the monitor were about: an empty walk mid-grace, a
process first seen during the grace, a zombie leader whose thread still holds a worker, repeated
SIGKILL, and kill_failed.
"""

from __future__ import annotations

import signal
from dataclasses import FrozenInstanceError

import pytest

from tunelab.agent.procs import ladder as L
from tunelab.agent.procs.ladder import Phase

TERM, KILL = signal.SIGTERM, signal.SIGKILL
LEADER, WORKER, LATE, FORKED = (10, 100.0), (11, 101.0), (12, 102.0), (13, 103.0)
GRACE, KILL_TIMEOUT = 5.0, 2.0

Tree = dict[int, float]
Step = tuple[float, Tree, list[tuple[tuple[int, float], signal.Signals]], Phase]


def tree(*procs: tuple[int, float]) -> Tree:
    return dict(procs)


# (name, tree at the stop request, SIGTERMs sent by begin, then each step)
TABLE: list[tuple[str, Tree, list[tuple[int, float]], list[Step]]] = [
    (
        "a tree that obeys SIGTERM is done within the grace, no SIGKILL",
        tree(LEADER, WORKER),
        [LEADER, WORKER],
        [
            (0.5, tree(LEADER, WORKER), [], Phase.TERM),  # termed ones are not signalled again
            (1.0, tree(), [], Phase.DONE),
        ],
    ),
    (
        "an empty walk mid-grace is not a way past the grace",
        tree(LEADER, WORKER),
        [LEADER, WORKER],
        [
            (1.0, tree(), [], Phase.DONE),  # the walk raced the leader's exit
            (1.1, tree(WORKER), [], Phase.TERM),  # the worker in transit: back to TERM, no KILL
            (4.9, tree(WORKER), [], Phase.TERM),
            (5.0, tree(WORKER), [(WORKER, KILL)], Phase.KILL),  # only once the grace is over
        ],
    ),
    (
        "a process first seen during the grace gets its own SIGTERM then",
        tree(LEADER),
        [LEADER],
        [
            (1.0, tree(LEADER, LATE), [(LATE, TERM)], Phase.TERM),
            (2.0, tree(LEADER, LATE), [], Phase.TERM),
            (5.0, tree(LATE), [(LATE, KILL)], Phase.KILL),
        ],
    ),
    (
        "a zombie leader whose thread still holds a worker: the tree is not empty, go on",
        tree(LEADER, WORKER),
        [LEADER, WORKER],
        [
            (1.0, tree(WORKER), [], Phase.TERM),  # the walk lists the worker, not the zombie
            (5.0, tree(WORKER), [(WORKER, KILL)], Phase.KILL),
            (5.1, tree(), [], Phase.DONE),
        ],
    ),
    (
        "SIGKILL is repeated every KILL_REPEAT to the whole tree, new processes included",
        tree(LEADER),
        [LEADER],
        [
            (5.0, tree(LEADER), [(LEADER, KILL)], Phase.KILL),
            (5.2, tree(LEADER), [], Phase.KILL),  # not yet: KILL_REPEAT is 0.5 s
            (5.5, tree(LEADER, FORKED), [(LEADER, KILL), (FORKED, KILL)], Phase.KILL),
        ],
    ),
    (
        "an empty walk after escalation resumes at KILL, not at TERM",
        tree(LEADER),
        [LEADER],
        [
            (5.0, tree(LEADER), [(LEADER, KILL)], Phase.KILL),
            (5.1, tree(), [], Phase.DONE),
            (5.6, tree(LEADER), [(LEADER, KILL)], Phase.KILL),
        ],
    ),
]


@pytest.mark.parametrize(("name", "first", "termed", "steps"), TABLE, ids=[r[0] for r in TABLE])
def test_the_ladder_table(
    name: str, first: Tree, termed: list[tuple[int, float]], steps: list[Step]
) -> None:
    ladder, sent = L.begin(GRACE, KILL_TIMEOUT, "stop requested", first, 0.0)
    assert [(s.pid, s.create_time) for s in sent] == termed
    assert all(s.sig is TERM for s in sent)
    for now, walked, expected, phase in steps:
        ladder, sent = L.step(ladder, walked, now)
        assert [((s.pid, s.create_time), s.sig) for s in sent] == expected, f"at t={now}"
        assert ladder.phase is phase, f"at t={now}"
    assert ladder.escalated == any(p is Phase.KILL for *_, p in steps)


def test_kill_failed_once_the_tree_outlives_the_kill_timeout_and_cleared_by_an_empty_walk() -> None:
    ladder, _ = L.begin(GRACE, KILL_TIMEOUT, "stop requested", tree(WORKER), 0.0)
    seen = []
    for now in (5.0, 5.5, 6.0, 6.5, 7.0, 7.5):
        ladder, _ = L.step(ladder, tree(WORKER), now)
        seen.append(ladder.kill_failed)
    assert seen == [False, False, False, False, False, True]  # > 2 s after the first SIGKILL
    ladder, _ = L.step(ladder, tree(), 7.6)
    assert ladder.phase is Phase.DONE and not ladder.kill_failed and ladder.escalated


def test_no_grace_still_sends_sigterm_first_and_leftovers_get_sigkill_at_once() -> None:
    ladder, sent = L.begin(0.0, KILL_TIMEOUT, "stop requested", tree(LEADER), 0.0)
    assert [s.sig for s in sent] == [TERM]
    ladder, sent = L.step(ladder, tree(LEADER), 0.0)
    assert [s.sig for s in sent] == [KILL]

    leftovers = L.for_leftovers(3.0)
    assert leftovers.for_leftovers and not ladder.for_leftovers
    leftovers, sent = L.step(leftovers, tree(WORKER), 3.0)
    assert [(s.pid, s.sig) for s in sent] == [(WORKER[0], KILL)] and leftovers.escalated


def test_the_ladder_is_frozen_and_negative_times_are_clamped() -> None:
    ladder, _ = L.begin(-1.0, -2.0, "x", tree(), 0.0)
    assert (ladder.grace, ladder.kill_timeout) == (0.0, 0.0)
    with pytest.raises(FrozenInstanceError):
        ladder.phase = Phase.KILL  # type: ignore[misc]
