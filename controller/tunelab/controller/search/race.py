"""Racing the top: a search's answer is decided, or says it is not (DESIGN.md, "Answers").

After the strategy's proposals, the incumbent (the best configuration the strategy found) and
each challenger not yet separated from it get more launches at one fixed load, the incumbent's
(the load it found, at its deepest rung's benchmark length), interleaved A B B A ... so a drift
of the machine falls on both sides alike. The launch is the unit: each launch is one value;
points inside one launch never make an interval.

After the strategy and after each round, one *look*: the best by mean at that load against each
other contender still racing, a log contrast over launches (``intervals.contrast``), the
challengers one family (Holm), every look a share of alpha (Bonferroni over the
``confirm - 1`` looks a race can take, so looking after every round does not inflate the
error). A challenger is *separated* when its Holm-adjusted p is within that share (the best is
better), *tied* when its interval lies inside ``±margin``. The race ends:

- a **winner** ("better"): every challenger separated;
- a **tie** ("either serves"): every challenger separated or tied, one tied at least;
- **undecided**: ``budget.confirm`` launches per contender (or its GPU time) spent first; the
  answer says how many launches would decide, at the spread seen.

A contender that *cannot serve* the race's load is separated whatever its throughput (a load is
only worth its throughput where the SLOs hold), while the best can: over its launches there,
some SLO's value / limit has its interval wholly above 1 (one-sided, at the look's share of
alpha, Bonferroni over the challengers and the SLOs). The race's load is the incumbent's own
edge, so a miss in one launch is noise, not evidence. Such a contender is never the best while
one that serves races.

Challengers are the strategy's runner-up (always: the answer is judged against it) and its
next best configurations whose objective lies within ``SCREEN`` of the incumbent's, at most
``MAX_CHALLENGERS`` in all. The space's default is launched at
the same load too (``DEFAULT_LAUNCHES``), so the answer's effect against the default is measured
at the winner's load, over launches.

Everything here is a pure function of the stored trials: a launch of the race is a trial whose
``details["race"]`` is its round, so a restarted controller replays the same looks and reaches
the same answer.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tunelab.analysis.intervals import (
    ALPHA,
    Estimate,
    Method,
    adjust,
    contrast,
    launches_needed,
    positive_interval,
)
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import Proposal, key
from tunelab.controller.search.trials import CLIENT_LIMITED, launch_load
from tunelab.controller.store.search_models import TrialRow

MAX_CHALLENGERS = 3
SCREEN = 0.25  # a challenger's objective within 25 % of the incumbent's enters the race
DEFAULT_LAUNCHES = 2  # launches of the default at the race's load (for the answer's effect)
MAX_FAILED = 2  # a contender whose race launches failed this often leaves the race

BETTER, TIE, UNDECIDED, RACING, ALONE = "better", "tie", "undecided", "racing", "alone"
# an entry's status
IN_RACE, SEPARATED, TIED, FAILED, REFERENCE = "racing", "separated", "tied", "failed", "default"


def is_race(t: TrialRow) -> bool:
    return bool(t.details.get("race"))


def is_fixed_load(t: TrialRow) -> bool:
    """A launch at a load it was given (the race's, or a drift launch of the default), not a
    trial of the strategy's: no ranking, trial budget or strategy sees it."""
    return is_race(t) or bool(t.details.get("drift"))


def slo_ratios(t: TrialRow) -> dict[str, float]:
    """Per SLO, the launch's value / limit (1 - its margin): above 1 missed it."""
    margins = t.details.get("slo_margins") or {}
    return {k: 1.0 - float(m) for k, m in margins.items() if isinstance(m, int | float)}


def launch_value(t: TrialRow) -> float | None:
    """One launch's value: the mean of its answer points (None: failed or no load met)."""
    if t.state != "DONE" or t.objective is None:
        return None
    return statistics.fmean(t.samples) if t.samples else t.objective


@dataclass(frozen=True)
class Ranked:
    """A configuration as the strategy left it: its deepest rung, the mean of its launches
    there (``score``), and the latest of them."""

    key: str
    params: dict[str, Any]
    rung: int
    score: float
    latest: TrialRow


def ranking(spec: SearchSpec, trials: Sequence[TrialRow]) -> list[Ranked]:
    """Feasible configurations, best first: the deepest rung reached first (successive
    halving's survivors), then by the mean over launches at that rung."""
    launches: dict[str, list[TrialRow]] = {}
    for t in trials:
        if not is_fixed_load(t) and launch_value(t) is not None:
            launches.setdefault(key(t.params), []).append(t)
    out = []
    for k, ts in launches.items():
        rung = max(t.rung for t in ts)
        deepest = sorted((t for t in ts if t.rung == rung), key=lambda t: t.number)
        values = [launch_value(t) or 0.0 for t in deepest]
        out.append(Ranked(k, deepest[-1].params, rung, statistics.fmean(values), deepest[-1]))
    out.sort(key=lambda r: r.latest.number)
    out.sort(key=lambda r: (-r.rung, -r.score if spec.maximize else r.score))
    return out


@dataclass
class Entry:
    """A configuration in the race: its launches at the race's load and rung."""

    key: str
    params: dict[str, Any]
    trial: int  # its first launch at the race's load (else its latest trial)
    status: str
    values: list[float] = field(default_factory=list)
    launches: list[int] = field(default_factory=list)  # their trial numbers
    missed: int = 0  # of those launches, how many missed an SLO at the race's load
    over: dict[str, list[float]] = field(default_factory=dict)  # per SLO, value / limit
    serves: bool = True  # not shown to miss an SLO there (set at each look)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    def misses(self, level: float) -> bool:
        """Shown to miss an SLO at the race's load: some SLO's value / limit, over launches,
        above 1 at one-sided ``level``."""
        for ratios in self.over.values():
            if len(ratios) >= 2 and len(ratios) == len(self.values):
                found = positive_interval(ratios, 1.0 - 2.0 * level)
                if found is not None and found[0] > 1.0:
                    return True
        return False


@dataclass(frozen=True)
class Comparison:
    """The best against one other contender, at one look."""

    other: str
    estimate: Estimate
    interval: tuple[float, float]  # relative: -0.1 is 10 % below the best
    confidence: float
    adjusted_p: float
    launches: tuple[int, int]  # (the best's, the other's)


@dataclass
class Standings:
    """Where the race stands, replayed from the stored trials."""

    verdict: str  # BETTER, TIE, UNDECIDED, RACING, ALONE; "" when nothing is feasible
    maximize: bool = True
    load: dict[str, float] | None = None
    rung: int = 0
    best: Entry | None = None
    entries: dict[str, Entry] = field(default_factory=dict)
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    rounds: int = 0
    pending: list[Proposal] = field(default_factory=list)  # this round's launches not queued
    running: int = 0  # launches of the race in flight
    gpu_seconds: float = 0.0
    needed: int | None = None  # launches per contender that would decide (undecided)

    @property
    def settled(self) -> bool:
        """Nothing more to launch: the search may end with this answer."""
        return self.verdict in (BETTER, TIE, UNDECIDED, ALONE, "") and not (
            self.pending or self.running
        )

    @property
    def runner_up(self) -> Entry | None:
        """The best of the other contenders by mean at the race's load (a separated one
        included), among those with two launches there, else with one."""
        if self.best is None:
            return None
        others = [
            e for e in self.entries.values() if e.key != self.best.key and e.status != REFERENCE
        ]
        measured = [e for e in others if len(e.values) >= 2] or [e for e in others if e.values]
        if not measured:
            return None
        return (max if self.maximize else min)(measured, key=lambda e: e.mean or 0.0)

    @property
    def tied_with(self) -> list[Entry]:
        return [e for e in self.entries.values() if e.status == TIED]


class _Replay:
    """One pass over the stored race: looks after the strategy and after each complete round."""

    def __init__(self, spec: SearchSpec, trials: Sequence[TrialRow]) -> None:
        self.spec = spec
        self.trials = sorted(trials, key=lambda t: t.number)
        self.race = [t for t in self.trials if is_race(t)]
        self.looks = max(1, spec.confirm_launches - 1)
        self.level = ALPHA / self.looks

    def evidence(self, st: Standings, upto: int) -> None:
        """Each entry's launches at the race's load and rung, race rounds <= ``upto``."""
        target = launch_load(st.load)
        for e in st.entries.values():
            e.values, e.launches, e.missed, e.over = [], [], 0, {}
        for t in self.trials:
            entry = st.entries.get(key(t.params))
            value = launch_value(t)
            if entry is None or value is None or t.rung != st.rung or t.details.get("drift"):
                continue
            if int(t.details.get("race") or 0) > upto:
                continue
            if launch_load(t.details.get("load")) != target:
                continue
            entry.values.append(value)
            entry.launches.append(t.number)
            ratios = slo_ratios(t)
            entry.missed += any(r > 1.0 for r in ratios.values())
            for name, ratio in ratios.items():
                entry.over.setdefault(name, []).append(ratio)
        for e in st.entries.values():
            if e.launches and e.status != REFERENCE:
                e.trial = e.launches[0]

    def racing(self, st: Standings) -> list[Entry]:
        live = [e for e in st.entries.values() if e.status == IN_RACE]
        return sorted(
            live,
            key=lambda e: (
                not e.values,
                not e.serves,
                -(e.mean or 0.0) if self.spec.maximize else (e.mean or 0.0),
                e.trial,
            ),
        )

    def look(self, st: Standings) -> None:
        """Compare the best with each other contender still racing; mark the settled ones."""
        live = self.racing(st)
        if not live:
            return
        # Bonferroni over the challengers and the SLOs: a contender shown to miss is one test
        shown = self.level / (max(1, len(live) - 1) * max(1, len(self.spec.slo)))
        for e in st.entries.values():
            e.serves = not e.misses(shown)
        live = self.racing(st)
        st.best = live[0]
        if len(st.best.values) < 2:
            return
        others = [e for e in live[1:] if len(e.values) >= 2]
        found = [(e, contrast(st.best.values, e.values)) for e in others]
        pairs = [(e, est) for e, est in found if est is not None]
        if not pairs:
            return
        m = len(live) - 1  # the family: every challenger still racing
        adjusted = adjust([est.p_value() for _, est in pairs], Method.HOLM)
        order = sorted(range(len(pairs)), key=lambda i: pairs[i][1].p_value())
        for rank, i in enumerate(order):
            e, est = pairs[i]
            confidence = 1.0 - self.level / max(1, m - rank)  # Holm's step for this one
            lo, hi = est.relative_interval(confidence)
            st.comparisons[e.key] = Comparison(
                e.key, est, (lo, hi), confidence, adjusted[i], (len(st.best.values), len(e.values))
            )
            ahead = est.log_ratio > 0 if self.spec.maximize else est.log_ratio < 0
            cannot_serve = st.best.serves and not e.serves  # shown to miss an SLO there
            if cannot_serve or (adjusted[i] <= self.level and ahead):
                e.status = SEPARATED
            elif -self.spec.margin <= lo and hi <= self.spec.margin:
                e.status = TIED

    def decided(self, st: Standings) -> str:
        live = self.racing(st)
        if len(live) > 1:
            return ""
        if any(e.status == TIED for e in st.entries.values()):
            return TIE
        challengers = [e for e in st.entries.values() if e.status in (SEPARATED, TIED)]
        return BETTER if challengers else ALONE

    def spent(self, st: Standings, upto: int) -> bool:
        live = self.racing(st)
        launched = min((len(e.values) for e in live), default=0)
        spent = sum(
            float(t.details.get("gpu_seconds") or 0.0)
            for t in self.race
            if int(t.details["race"]) <= upto
        )
        st.gpu_seconds = round(spent, 3)
        if self.spec.confirm_seconds and spent >= self.spec.confirm_seconds:
            return True
        return launched >= self.spec.confirm_launches

    def plan(self, st: Standings, round_number: int, decided: bool) -> list[str]:
        """The keys a round launches, in order: the contenders still racing and the default
        while it lacks launches, reversed every other round (A B B A ...). Called with the
        evidence of the rounds before it only, so a round's plan never changes."""
        if self.spec.confirm_launches == 0:
            return []
        keys = [] if decided else [e.key for e in self.racing(st)]
        default = next((e for e in st.entries.values() if e.status == REFERENCE), None)
        if default is not None and self.failures(default.key, round_number) < MAX_FAILED:
            if not decided and len(default.values) < DEFAULT_LAUNCHES:
                keys.append(default.key)
            elif decided:
                keys += [default.key] * max(0, 2 - len(default.values))
        if round_number % 2 == 0:
            keys.reverse()
        return keys

    def failures(self, k: str, before: int) -> int:
        return sum(
            1
            for t in self.race
            if key(t.params) == k
            and t.state in ("FAILED", "CANCELLED", "SKIPPED")  # SKIPPED: refused at creation
            and t.failure_reason not in CLIENT_LIMITED
            and int(t.details["race"]) < before
        )


def standings(spec: SearchSpec, trials: Sequence[TrialRow]) -> Standings:
    """The race replayed from the stored trials: where it stands, and what to launch next."""
    ranked = ranking(spec, trials)
    if not ranked:
        return Standings("")
    incumbent = ranked[0]
    st = Standings(RACING, spec.maximize, None, incumbent.rung)
    axis_load = launch_load(incumbent.latest.details.get("load"))
    st.load = None if axis_load is None else {axis_load[0]: axis_load[1]}
    near = [r for r in ranked[2:] if _within(spec, r.score, incumbent.score)]
    field_ = [*ranked[:2], *near[: MAX_CHALLENGERS - 1]]
    for ranked_one in field_:
        st.entries[ranked_one.key] = Entry(
            ranked_one.key, ranked_one.params, ranked_one.latest.number, IN_RACE
        )
    default_key = key(spec.default_params)
    if default_key not in st.entries:
        runs = [t for t in trials if key(t.params) == default_key and t.state == "DONE"]
        runs = [t for t in runs if not is_fixed_load(t)]
        if runs:
            last = runs[-1]
            st.entries[default_key] = Entry(default_key, last.params, last.number, REFERENCE)
    replay = _Replay(spec, trials)
    st.running = sum(1 for t in replay.race if t.state == "RUNNING")
    if st.load is None:
        st.verdict, st.best = (ALONE if len(field_) == 1 else UNDECIDED), st.entries[incumbent.key]
        return st
    rounds = max((int(t.details["race"]) for t in replay.race), default=0)
    verdict = ""
    for r in range(rounds + 1):
        if r > 0:  # the round as planned after the one before it
            planned = replay.plan(st, r, bool(verdict))
            in_round = [t for t in replay.race if int(t.details["race"]) == r]
            if len(in_round) < len(planned) or any(t.state == "RUNNING" for t in in_round):
                st.rounds = r
                st.pending = _proposals(st, planned[len(in_round) :], r)
                st.verdict = verdict or RACING
                replay.evidence(st, rounds)  # shown: every launch ended so far (no look)
                _finish_best(replay, st)
                return st
        replay.evidence(st, r)
        st.rounds = r
        for e in replay.racing(st):
            if replay.failures(e.key, r + 1) >= MAX_FAILED:
                e.status = FAILED
        if not verdict:
            replay.look(st)
            verdict = replay.decided(st)
            if not verdict and replay.spent(st, r):
                verdict = UNDECIDED
    replay.spent(st, rounds)
    st.pending = _proposals(st, replay.plan(st, rounds + 1, bool(verdict)), rounds + 1)
    st.verdict = verdict or RACING
    _finish_best(replay, st)
    if st.verdict == UNDECIDED:
        st.needed = _needed(spec, st)
    return st


def _within(spec: SearchSpec, score: float, incumbent: float) -> bool:
    """A challenger's objective within SCREEN of the incumbent's (it may still be the best)."""
    if spec.maximize:
        return score >= incumbent * (1.0 - SCREEN)
    return score <= incumbent / (1.0 - SCREEN)


def _finish_best(replay: _Replay, st: Standings) -> None:
    live = replay.racing(st)
    if live:
        st.best = live[0]
    elif st.best is None:
        st.best = next((e for e in st.entries.values() if e.status != REFERENCE), None)


def _proposals(st: Standings, keys: Sequence[str], round_number: int) -> list[Proposal]:
    return [Proposal(st.entries[k].params, st.rung, load=st.load, race=round_number) for k in keys]


def versus(spec: SearchSpec, st: Standings, other: Entry) -> Comparison | None:
    """The best against ``other`` over their launches at the race's load: the estimate, and its
    interval at the confidence the race judged it with (its Holm step, else one look's)."""
    if st.best is None:
        return None
    est = contrast(st.best.values, other.values)
    if est is None:
        return None
    seen = st.comparisons.get(other.key)
    confidence = seen.confidence if seen else 1.0 - ALPHA / max(1, spec.confirm_launches - 1)
    return Comparison(
        other.key,
        est,
        est.relative_interval(confidence),
        confidence,
        seen.adjusted_p if seen else est.p_value(),
        (len(st.best.values), len(other.values)),
    )


def _needed(spec: SearchSpec, st: Standings) -> int | None:
    """Launches per contender that would decide the best against the runner-up, at the spread
    seen: enough to exclude zero when they differ by more than the margin, else to fit the
    interval inside it."""
    runner = st.runner_up
    found = None if runner is None else versus(spec, st, runner)
    if found is None or st.best is None or runner is None:
        return None
    change = abs(found.estimate.ratio - 1.0)
    target = max(change, spec.margin - change)
    n = min(len(st.best.values), len(runner.values))
    return launches_needed(found.estimate, n, target, found.confidence)
