"""The one pairwise rule: is a variant better than, worse than, tied with a reference, or is it
undecided? (docs/judging.md; issue 43.3).

Every verdict in tunelab comes from :func:`judge_pair`: compare's effects and the report's
Summary, the search's race and drift, the answer's effect against the default, and a watch's
occurrences. Callers differ only in the estimate they hand in (a log contrast over launches,
``intervals.Estimate``), the confidence of its interval (a family's, a look's share of alpha) and
whether a family's correction let the row through (``discovered``); the rule and its order are
here, once:

1. no estimate (fewer than two launches a side, a mean not positive) -> UNDECIDED;
2. the interval lies inside ``±margin`` -> TIE (the band first: a difference too small to
   matter is a tie even when it is real);
3. the interval lies on one side of 0, and the family's correction passed -> BETTER or WORSE,
   by the metric's direction;
4. else UNDECIDED, with about how many launches a side would decide.

``margin`` is a fraction (0.05 is 5 %), as everywhere in tunelab (``spec.schema.Checker.fraction``
reads "5%" and 0.05 alike). Contexts word a verdict their own way through :func:`wording`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from tunelab.analysis.intervals import Estimate, launches_needed
from tunelab.analysis.metrics import Metric

WELCH = "welch log-ratio over launches"


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    TIE = "tie"
    UNDECIDED = "undecided"


# how each context words a verdict (a context not named here says the verdict itself)
_WORDS: dict[str, dict[Verdict, str]] = {
    "compare": {Verdict.TIE: "no meaningful difference", Verdict.UNDECIDED: "not enough repeats"},
    "interaction": {
        Verdict.BETTER: "interaction",
        Verdict.WORSE: "interaction",
        Verdict.TIE: "no meaningful interaction",
        Verdict.UNDECIDED: "not enough repeats",
    },
    "watch": {
        Verdict.BETTER: "improvement",
        Verdict.WORSE: "regression",
        Verdict.TIE: "no change",
    },
    "race": {},
    "answer": {Verdict.TIE: "no meaningful difference"},
    "drift": {
        Verdict.BETTER: "drift",
        Verdict.WORSE: "drift",
        Verdict.TIE: "stable",
        Verdict.UNDECIDED: "not judged",
    },
}


def wording(verdict: Verdict, context: str) -> str:
    """The verdict as ``context`` ("compare", "interaction", "watch", "race", "answer",
    "drift") says it."""
    return _WORDS.get(context, {}).get(verdict, verdict.value)


@dataclass(frozen=True)
class Judgement:
    """One comparison's verdict and what it rests on.

    ``change`` and ``interval`` are relative, in the metric's raw direction (variant over
    reference minus one: 0.05 is +5 %); ``needed`` is the launches a side that would decide an
    UNDECIDED one at the spread seen (None: more launches are not what it lacks)."""

    verdict: Verdict
    change: float | None
    interval: tuple[float, float] | None
    confidence: float
    margin: float
    launches: tuple[int, int]  # (variant, reference)
    method: str = WELCH
    p: float | None = None
    needed: int | None = None
    reason: str = ""

    @property
    def decided(self) -> bool:
        return self.verdict is not Verdict.UNDECIDED


def needed(estimate: Estimate, n: int, margin: float, confidence: float) -> int | None:
    """Launches a side that would decide at the spread seen: until the interval excludes 0 (its
    half-width below the effect) or fits inside ``±margin`` (below the room the effect leaves),
    whichever comes first."""
    effect = abs(estimate.log_ratio)
    room = math.log1p(margin) - effect if margin > 0 else 0.0
    widths = [math.expm1(w) for w in (effect, room) if w > 0]
    found = [launches_needed(estimate, n, w, confidence) for w in widths]
    known = [k for k in found if k is not None]
    return min(known) if known else None


def judge_pair(
    estimate: Estimate | None,
    metric: Metric,
    *,
    margin: float,
    confidence: float,
    launches: tuple[int, int],
    discovered: bool | None = None,
    reason: str = "",
) -> Judgement:
    """THE rule (module docstring). ``discovered`` False: the family's correction did not let
    this row through, so it may be a tie but never better or worse. ``reason``: why the row
    cannot be judged whatever its interval (a cell too noisy), recorded as UNDECIDED."""
    if not (math.isfinite(margin) and 0.0 <= margin < 1.0):
        raise ValueError(f"margin must be a fraction in [0, 1) (0.05 is 5 %), got {margin!r}")
    if estimate is None:
        short = min(launches, default=0) < 2
        return Judgement(
            Verdict.UNDECIDED,
            None,
            None,
            confidence,
            margin,
            launches,
            needed=2 if short else None,
            reason=reason,
        )
    lo, hi = estimate.relative_interval(confidence)
    change = estimate.ratio - 1.0
    base = Judgement(
        Verdict.UNDECIDED,
        change,
        (lo, hi),
        confidence,
        margin,
        launches,
        p=estimate.p_value(),
        reason=reason,
    )
    if reason:
        return base
    if -margin <= lo and hi <= margin:
        return replace(base, verdict=Verdict.TIE)
    if discovered is not False and (lo > 0.0 or hi < 0.0):
        up = lo > 0.0
        return replace(
            base, verdict=Verdict.BETTER if up == metric.higher_is_better else Verdict.WORSE
        )
    n = min(launches)
    return replace(base, needed=needed(estimate, n, margin, confidence))
