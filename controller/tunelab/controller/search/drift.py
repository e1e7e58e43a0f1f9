"""Drift over a search: the stored trials in, the drift state machine's asks and verdict out
(``tunelab.analysis.drift`` states the rules).

A search runs for minutes to hours; the machine under it may change meanwhile. The space's
default is launched ``LAUNCHES`` times at one fixed load at the start and as many at the end,
ordinary trials whose phase is drift start or end; they count against no budget, and no
ranking, race or effect uses them. A drift judged better or worse (the one judge, at 95 %) is
a warning on the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tunelab.analysis import drift as machine
from tunelab.analysis.evidence import Phase
from tunelab.analysis.judge import Judgement, Verdict, wording
from tunelab.analysis.metrics import lookup
from tunelab.controller.search.race import launch_of
from tunelab.controller.search.race import phase as launch_phase
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import Proposal, key
from tunelab.controller.store.search_models import TrialRow

LAUNCHES = machine.LAUNCHES
START, END = "start", "end"
DRIFTED, STABLE, UNJUDGED = "drift", "stable", "not judged"


def phase(t: TrialRow) -> str:
    """``"start"`` or ``"end"`` for a drift launch, else ``""``."""
    found = launch_phase(t)
    return {Phase.DRIFT_START: START, Phase.DRIFT_END: END}.get(found, "")


def state(spec: SearchSpec, trials: Sequence[TrialRow], ending: bool = False) -> machine.DriftState:
    start = machine.DriftState(key(spec.default_params), spec.confirm_launches > 0, ending)
    return machine.step(start, [launch_of(t) for t in trials])[0]


def pending(spec: SearchSpec, trials: Sequence[TrialRow], which: str) -> list[Proposal]:
    """The drift launches still to queue at ``which`` end."""
    st = machine.DriftState(key(spec.default_params), spec.confirm_launches > 0, which == END)
    _, asks = machine.step(st, [launch_of(t) for t in trials])
    want = Phase.DRIFT_START if which == START else Phase.DRIFT_END
    return [
        Proposal(dict(spec.default_params), 0, load={a.load[0]: a.load[1]}, drift=which)
        for a in asks
        if a.phase is want
    ]


def running(trials: Sequence[TrialRow]) -> int:
    return sum(1 for t in trials if phase(t) and t.state == "RUNNING")


@dataclass(frozen=True)
class Drift:
    """The default at the end against the start."""

    start: list[int]  # trial numbers of the launches that gave a value
    end: list[int]
    load: dict[str, float]
    judgement: Judgement
    verdict: str  # DRIFTED, STABLE, UNJUDGED


def judge(spec: SearchSpec, trials: Sequence[TrialRow]) -> Drift | None:
    """The drift over the search; None when no drift launch was queued."""
    st = state(spec, trials)
    found = machine.judge(st, lookup(spec.objective), spec.margin)
    if found is None:
        return None
    load = {} if st.load is None else {st.load[0]: st.load[1]}
    numbers = [[x.number for x in side if x.value is not None] for side in (st.start, st.end)]
    return Drift(numbers[0], numbers[1], load, found, wording(found.verdict, "drift"))


def warning(spec: SearchSpec, found: Drift | None) -> str:
    """The answer's warning for a drift beyond the noise, else ``""``."""
    if found is None or found.judgement.verdict not in (Verdict.BETTER, Verdict.WORSE):
        return ""
    j = found.judgement
    lo, hi = j.interval or (0.0, 0.0)
    at = ", ".join(f"{k} {v:g}" for k, v in found.load.items())
    return (
        f"drift: the default measured {j.change or 0.0:+.1%} [{lo:+.1%}, {hi:+.1%}] "
        f"at the end against the start of the search (trials {_numbers(found.end)} against "
        f"{_numbers(found.start)}, at {at}): the machine changed while the search ran, so its "
        "comparisons may not hold; run it again"
    )


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(str(n) for n in numbers)
