"""Drift over a search as a pure state machine: the default launched at one fixed load at the
search's start and again at its end, the end judged against the start (DESIGN.md, "Answers").

:func:`step` takes the state and every launch known so far and returns the next state and the
drift launches to ask for: ``LAUNCHES`` at the start as soon as the default's first strategy
trial has found a load, as many at the end once ``ending`` is set (the race settled). A failed
launch counts toward ``LAUNCHES``: the drift check never holds a search up. :func:`judge` is
the one judge's verdict on the end against the start (better / worse: the machine drifted;
tie: stable within ``±margin``; undecided: the check could not tell).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tunelab.analysis.evidence import Launch, Load, Phase
from tunelab.analysis.intervals import ALPHA, contrast
from tunelab.analysis.judge import Judgement, judge_pair
from tunelab.analysis.metrics import Metric

LAUNCHES = 2  # the default's launches at each end: two give an interval


@dataclass(frozen=True)
class DriftState:
    config: str  # the default's key
    enabled: bool = True  # a search without a race (confirm: 0) makes no drift launches
    ending: bool = False  # the race settled: the end's launches may be made
    load: Load | None = None
    start: tuple[Launch, ...] = ()
    end: tuple[Launch, ...] = ()


@dataclass(frozen=True)
class DriftAsk:
    config: str
    load: Load
    phase: Phase


def step(state: DriftState, launches: Sequence[Launch]) -> tuple[DriftState, tuple[DriftAsk, ...]]:
    ordered = sorted(launches, key=lambda x: x.number)
    load = state.load
    if load is None:
        first = next(
            (
                x
                for x in ordered
                if x.config == state.config
                and x.phase is Phase.STRATEGY
                and x.load is not None
                and not x.failed
                and not x.running
            ),
            None,
        )
        load = first.load if first is not None else None
    start = tuple(x for x in ordered if x.phase is Phase.DRIFT_START)
    end = tuple(x for x in ordered if x.phase is Phase.DRIFT_END)
    if start and load is None:  # launched by an earlier controller at the load it found then
        load = start[0].load
    state = replace(state, load=load, start=start, end=end)
    if not state.enabled or load is None:
        return state, ()
    missing = LAUNCHES - len(start)
    phase = Phase.DRIFT_START
    if missing <= 0 and state.ending:
        missing, phase = LAUNCHES - len(end), Phase.DRIFT_END
    return state, tuple(DriftAsk(state.config, load, phase) for _ in range(max(0, missing)))


def running(state: DriftState) -> int:
    return sum(1 for x in (*state.start, *state.end) if x.running)


def judge(state: DriftState, metric: Metric, margin: float) -> Judgement | None:
    """The end against the start over the launches that gave a value (95 %); None when no drift
    launch was made."""
    if not (state.start or state.end):
        return None
    first = [x.value for x in state.start if x.value is not None]
    last = [x.value for x in state.end if x.value is not None]
    return judge_pair(
        contrast(last, first),
        metric,
        margin=margin,
        confidence=1.0 - ALPHA,
        launches=(len(last), len(first)),
    )
