"""A watch metric's state: what alerts, ``watch ls`` and the webhook follow (docs/watch-judging.md,
"State"). A pure ``step(state, observation) -> state``, one per judged occurrence.

* An occurrence's ``regression`` against the baseline, or a new change point in the history
  whose step is worse by at least the margin, makes the state ``regression``.
* A ``regression`` stays until an occurrence shows ``no change`` against a baseline from before
  the step (under ``baseline: previous`` the previous occurrence is already past the step, so
  its "no change" says nothing about a return), or an ``improvement``, or until a new change
  point steps back the better way. An ``undecided`` occurrence never clears it.
* Otherwise the state is the latest decided verdict; ``undecided`` until one is decided, and
  ``baseline`` while the baseline is being gathered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tunelab.analysis.watch.judge import IMPROVEMENT, NO_CHANGE, REGRESSION, UNDECIDED

BASELINE = "baseline"
STATES = (REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED, BASELINE)
WORSE, BETTER = "worse", "better"


@dataclass(frozen=True)
class MetricState:
    state: str = UNDECIDED
    since: int = 0  # the occurrence that put it in this state
    cause: str = ""  # "verdict" or "change point before #N"
    step_at: int = 0  # the first occurrence after the step that caused a regression
    seen_point: int = 0  # the newest change point already acted on (its occurrence)

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "since": self.since,
            "cause": self.cause,
            "step_at": self.step_at,
            "seen_point": self.seen_point,
        }

    @classmethod
    def from_dict(cls, d: Any) -> MetricState:
        if not isinstance(d, dict) or d.get("state") not in STATES:
            return cls()
        return cls(
            str(d["state"]),
            int(d.get("since", 0)),
            str(d.get("cause", "")),
            int(d.get("step_at", 0)),
            int(d.get("seen_point", 0)),
        )


@dataclass(frozen=True)
class Observation:
    """One judged occurrence, for one metric."""

    number: int
    verdict: str  # the metric's verdict against the baseline, or "baseline"
    baseline_last: int = 0  # the newest occurrence of the baseline it was judged against
    point: int = 0  # the newest change point in the window (the occurrence after it), 0: none
    shift: str = ""  # that point's step: "worse" or "better" (by at least the margin), or ""


def step(state: MetricState, obs: Observation) -> MetricState:
    """The state after ``obs`` (the module's docstring)."""
    new_point = obs.point > state.seen_point and obs.shift in (WORSE, BETTER)
    seen = obs.point if new_point else state.seen_point
    state = replace(state, seen_point=seen)

    def to(name: str, cause: str, step_at: int = 0) -> MetricState:
        if state.state == name:
            return state
        return MetricState(name, obs.number, cause, step_at, seen)

    if obs.verdict == REGRESSION:
        return to(REGRESSION, "verdict", obs.number)
    if new_point and obs.shift == WORSE:
        return to(REGRESSION, f"change point before #{obs.point}", obs.point)
    if new_point and obs.shift == BETTER and state.state == REGRESSION:
        return to(IMPROVEMENT, f"change point before #{obs.point}")
    if obs.verdict in (NO_CHANGE, IMPROVEMENT):
        past = state.step_at and obs.baseline_last >= state.step_at
        if state.state == REGRESSION and past and obs.verdict == NO_CHANGE:
            return state  # no change against a baseline already past the step: no return
        return to(obs.verdict, "verdict")
    if obs.verdict == BASELINE and state.state in (UNDECIDED, BASELINE):
        return to(BASELINE, "gathering the baseline")
    if obs.verdict == UNDECIDED and state.state == BASELINE:
        return to(UNDECIDED, "")
    return state  # undecided (or a new baseline): the state holds
