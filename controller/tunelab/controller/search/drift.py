"""Drift over a search: the default re-launched at its start and its end (DESIGN.md, "Answers").

A search runs for minutes to hours; the machine under it may change meanwhile (clocks, a
neighbour, a thermal limit, a driver reset). Every comparison of the search assumes it did
not. So the space's default is launched ``LAUNCHES`` times at one fixed load as soon as its
first trial has found one (the *start*), and as many times again once the race is settled
(the *end*), like the race's launches: ordinary trials, measured at that load whatever the
SLOs say, whose ``details["drift"]`` is ``"start"`` or ``"end"``. They count against no
budget, and no ranking, race or effect uses them.

The end against the start is a log contrast over launches (``intervals.contrast``); its 95 %
interval lying wholly outside ``±margin`` (the search's tie margin) is a drift beyond the
noise, and a warning on the answer. Everything here is a pure function of the stored trials,
so a restarted controller queues the same launches and judges the same drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tunelab.analysis.intervals import Estimate, contrast
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import Proposal, key
from tunelab.controller.search.trials import launch_load
from tunelab.controller.store.search_models import TrialRow

LAUNCHES = 2  # the default's launches at each end: two give an interval
START, END = "start", "end"
DRIFTED, STABLE, UNJUDGED = "drift", "stable", "not judged"


def phase(t: TrialRow) -> str:
    """``"start"`` or ``"end"`` for a drift launch, else ``""``."""
    return str(t.details.get("drift") or "")


def _value(t: TrialRow) -> float | None:
    if t.state != "DONE" or t.objective is None:
        return None
    return t.objective


def _reference(spec: SearchSpec, trials: Sequence[TrialRow]) -> TrialRow | None:
    """The default's first finished trial of the strategy that settled on a load: the load the
    drift launches are made at."""
    default = key(spec.default_params)
    for t in sorted(trials, key=lambda t: t.number):
        if key(t.params) != default or phase(t) or t.details.get("race"):
            continue
        if t.state == "DONE" and launch_load(t.details.get("load")) is not None:
            return t
    return None


def pending(spec: SearchSpec, trials: Sequence[TrialRow], which: str) -> list[Proposal]:
    """The drift launches still to queue at ``which`` end (``LAUNCHES`` in all, a failed one
    included): none when the default has no load yet, or (the end) before any start."""
    if spec.confirm_launches == 0:
        return []  # no race, no second look: a search asked to be quick
    missing = LAUNCHES - sum(1 for t in trials if phase(t) == which)
    if missing <= 0:
        return []
    reference = _reference(spec, trials)
    if reference is None:
        return []
    if which == END and not any(phase(t) == START for t in trials):
        return []
    load = launch_load(reference.details.get("load"))
    if load is None:
        return []
    fixed = {load[0]: load[1]}
    return [Proposal(reference.params, 0, load=fixed, drift=which)] * missing


def running(trials: Sequence[TrialRow]) -> int:
    return sum(1 for t in trials if phase(t) and t.state == "RUNNING")


@dataclass(frozen=True)
class Drift:
    """The default at the end against the start."""

    start: list[int]  # trial numbers of the launches that gave a value
    end: list[int]
    load: dict[str, float]
    estimate: Estimate | None
    interval: tuple[float, float] | None  # relative: -0.1 is 10 % below the start
    verdict: str  # DRIFTED, STABLE, UNJUDGED


def judge(spec: SearchSpec, trials: Sequence[TrialRow]) -> Drift | None:
    """The drift over the search; None when no drift launch was queued."""
    start = [t for t in trials if phase(t) == START and _value(t) is not None]
    end = [t for t in trials if phase(t) == END and _value(t) is not None]
    if not any(phase(t) for t in trials):
        return None
    first = next((t for t in trials if phase(t)), None)
    found = launch_load(first.details.get("load")) if first is not None else None
    load = {} if found is None else {found[0]: found[1]}
    estimate = contrast([_value(t) or 0.0 for t in end], [_value(t) or 0.0 for t in start])
    if estimate is None:
        return Drift([t.number for t in start], [t.number for t in end], load, None, None,
                     UNJUDGED)  # fmt: skip
    lo, hi = estimate.relative_interval()
    verdict = DRIFTED if lo > spec.margin or hi < -spec.margin else STABLE
    return Drift(
        [t.number for t in start], [t.number for t in end], load, estimate, (lo, hi), verdict
    )


def warning(spec: SearchSpec, found: Drift | None) -> str:
    """The answer's warning for a drift beyond the noise, else ``""``."""
    if found is None or found.verdict != DRIFTED or found.estimate is None:
        return ""
    lo, hi = found.interval or (0.0, 0.0)
    at = ", ".join(f"{k} {v:g}" for k, v in found.load.items())
    return (
        f"drift: the default measured {found.estimate.ratio - 1.0:+.1%} [{lo:+.1%}, {hi:+.1%}] "
        f"at the end against the start of the search (trials {_numbers(found.end)} against "
        f"{_numbers(found.start)}, at {at}), beyond ±{spec.margin:.0%}: the machine changed "
        "while the search ran, so its comparisons may not hold; run it again"
    )


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(str(n) for n in numbers)
