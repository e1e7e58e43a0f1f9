"""The race of a search's top as a pure state machine (DESIGN.md, "Answers"; issue 43.4).

:func:`step` takes the race's state and every launch known so far (:class:`evidence.Launch`) and
returns the next state and the launches to ask for, like ``procs/ladder.py``: no store, no clock.
The controller (``controller/search/race.py``) builds the first state from the strategy's
ranking and calls :func:`step` with the stored launches; a restarted controller calling it with
the same launches reaches the same state, since rounds are absorbed in order and a round's plan
is fixed by the rounds before it.

Rules, each a test in tests/unit/analysis/test_race.py:

- **Rounds.** Round 0 is the strategy's launches at the race's load and rung; round r >= 1 is
  what :func:`plan_round` (a policy, replaceable: a cost-aware one may weigh GPU-seconds)
  asked for after round r - 1. A round is absorbed once every launch of it has ended.
- **Looks are counted and bounded.** A *look* judges the best against every other contender
  still racing, a Holm family at ``alpha / (confirm - 1)``. It is taken only when the fewest
  launches of a racing contender has grown past the last look's (2, 3, ... confirm), so at most
  ``confirm - 1`` looks are taken and the alpha spent is at most ``alpha``: a failed or
  client-limited launch adds a round, never a look.
- **Every verdict through the one judge** (analysis/judge.py): a contender is TIED when the
  interval lies inside ``±margin``, SEPARATED when the best is better (or the best serves the
  load and it is shown not to: some SLO's value / limit wholly above 1).
- **A status remembers its best.** A tie or separation judged against another best than the
  current one is void: the contender races again (the stale-tie bug: "tie ... either serves"
  for 109.4 against 100.0 once a third configuration took the lead).
- **The effect against the default is measured on fresh launches**: once the race is decided,
  ``EFFECT_LAUNCHES`` more launches each of the best and the default, interleaved; the launches
  that chose the winner are not reused (they are selected high: reusing them called a no-op
  "better" in 10 % of A/A searches).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from tunelab.analysis import variance
from tunelab.analysis.evidence import Launch, Load, Phase
from tunelab.analysis.intervals import (
    ALPHA,
    Cell,
    Estimate,
    Method,
    adjust,
    contrast,
    log_contrast,
)
from tunelab.analysis.judge import Judgement, Verdict, judge_pair
from tunelab.analysis.metrics import Direction, Metric

MAX_FAILED = 2  # a contender whose race launches failed this often leaves the race
EFFECT_LAUNCHES = 3  # fresh launches each of the best and the default, after the race
# a launch's SLO value over its limit: a derived figure, judged only here (not a metric to watch)
SLO_RATIO = Metric("slo_ratio", "slo_ratio", Direction.LOWER, "", "SLO value / limit", "launch")


class Status(StrEnum):
    RACING = "racing"
    SEPARATED = "separated"  # the best is better (or it cannot serve the load)
    TIED = "tied"
    FAILED = "failed"


class Outcome(StrEnum):
    RACING = "racing"
    BETTER = "better"  # a winner: every challenger separated
    TIE = "tie"  # every challenger separated or tied, one tied at least
    UNDECIDED = "undecided"  # the budget spent first
    ALONE = "alone"  # one contender only


@dataclass(frozen=True)
class Settings:
    """What the race is judged by; ``confirm`` launches per contender at most."""

    metric: Metric
    margin: float
    confirm: int
    load: Load | None
    rung: int = 0
    confirm_seconds: float = 0.0
    slos: int = 0
    default: str | None = None  # the default's key: the effect's reference
    alpha: float = ALPHA
    prior: variance.Prior | None = None  # search.noise: the variance components declared

    @property
    def looks(self) -> int:
        return max(1, self.confirm - 1)

    @property
    def level(self) -> float:
        """One look's share of alpha (Bonferroni over the looks)."""
        return self.alpha / self.looks

    @property
    def max_rounds(self) -> int:
        """Rounds after which the race is undecided whatever failed (client-limited launches
        are asked for again, but not for ever)."""
        return 3 * max(self.confirm, 1) + MAX_FAILED


@dataclass(frozen=True)
class Contender:
    """A configuration in the race: its launches at the race's load and rung, and its status
    with the best it was judged against and the judgement that set it."""

    key: str
    first: int  # its first launch at the race's load (else the strategy's latest trial)
    status: Status = Status.RACING
    values: tuple[float, ...] = ()
    blocks: tuple[tuple[float, ...], ...] = ()  # each launch's blocks, beside ``values``
    launches: tuple[int, ...] = ()
    ratios: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    missed: int = 0  # launches that missed an SLO at the race's load
    failures: int = 0
    serves: bool = True
    against: str | None = None
    judgement: Judgement | None = None

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None


@dataclass(frozen=True)
class Ask:
    """A launch to make: ``config`` at the race's load, in ``round``."""

    config: str
    round: int
    phase: Phase


@dataclass(frozen=True)
class RaceState:
    settings: Settings
    contenders: tuple[Contender, ...]
    round: int = -1  # the last round absorbed (0: the strategy's)
    looks: int = 0
    looked_at: int = 0  # launches per contender at the last look
    outcome: Outcome = Outcome.RACING
    best: str | None = None
    planned: tuple[str, ...] = ()  # round ``round + 1``'s launches, in order
    planned_phase: Phase = Phase.RACE
    effect: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    effect_failures: Mapping[str, int] = field(default_factory=dict)
    gpu_seconds: float = 0.0

    def get(self, key: str) -> Contender | None:
        return next((c for c in self.contenders if c.key == key), None)

    @property
    def racing(self) -> list[Contender]:
        """The contenders still racing, best first: those with a value, then those not shown
        to miss an SLO, then by mean in the metric's direction, then the earliest."""
        up = self.settings.metric.higher_is_better
        live = [c for c in self.contenders if c.status is Status.RACING]
        return sorted(
            live,
            key=lambda c: (
                not c.values,
                not c.serves,
                -(c.mean or 0.0) if up else (c.mean or 0.0),
                c.first,
            ),
        )

    @property
    def runner_up(self) -> Contender | None:
        """The best of the others by mean (never a FAILED one), among those with two launches
        at the race's load, else one."""
        others = [
            c for c in self.contenders if c.key != self.best and c.status is not Status.FAILED
        ]
        measured = [c for c in others if len(c.values) >= 2] or [c for c in others if c.values]
        if not measured:
            return None
        pick = max if self.settings.metric.higher_is_better else min
        return pick(measured, key=lambda c: c.mean or 0.0)

    @property
    def alpha_spent(self) -> float:
        return self.looks * self.settings.level


Policy = Callable[[RaceState], tuple[str, ...]]


def start(settings: Settings, field_: Sequence[tuple[str, int]]) -> RaceState:
    """The race before round 0: ``field_`` is (key, its latest trial number), best first."""
    contenders = tuple(Contender(k, n) for k, n in field_)
    return RaceState(settings, contenders, best=contenders[0].key if contenders else None)


def plan_round(state: RaceState) -> tuple[str, ...]:
    """The default policy: the racing contenders with the fewest launches (all of them when
    even), best first, reversed every other round (A B B A ...) so a drift of the machine falls
    on both sides alike."""
    live = state.racing
    if not live:
        return ()
    fewest = min(len(c.values) for c in live)
    keys = [c.key for c in live if len(c.values) == fewest]
    if (state.round + 1) % 2 == 0:
        keys.reverse()
    return tuple(keys)


def plan_effect(state: RaceState) -> tuple[str, ...]:
    """The fresh launches of the best and the default still missing, interleaved."""
    default, best = state.settings.default, state.best
    if default is None or best is None or best == default or state.settings.confirm == 0:
        return ()
    winner = state.get(best)
    if winner is None or winner.status is Status.FAILED:
        return ()
    needs = {}
    for k in (best, default):
        if state.effect_failures.get(k, 0) >= MAX_FAILED:
            return ()
        needs[k] = EFFECT_LAUNCHES - len(state.effect.get(k, ()))
    order: list[str] = []
    pattern = [best, default, default, best] * EFFECT_LAUNCHES
    for k in pattern:
        if needs[k] > 0:
            order.append(k)
            needs[k] -= 1
    return tuple(order)


def step(
    state: RaceState, launches: Sequence[Launch], policy: Policy = plan_round
) -> tuple[RaceState, tuple[Ask, ...]]:
    """Absorb every complete round after ``state.round`` (in order), and return the launches
    of the next round not yet made. ``launches``: the strategy's at the race's load and rung
    (round 0) and the race's own (phase RACE or EFFECT), in any order."""
    ordered = sorted(launches, key=lambda x: x.number)
    while True:
        r = state.round + 1
        if r == 0:
            state = _absorb(state, [x for x in ordered if x.phase is Phase.STRATEGY], policy)
            continue
        if not state.planned:
            return state, ()
        in_round = [x for x in ordered if x.round == r and x.phase in (Phase.RACE, Phase.EFFECT)]
        if len(in_round) < len(state.planned) or any(x.running for x in in_round):
            rest = state.planned[len(in_round) :]
            return state, tuple(Ask(k, r, state.planned_phase) for k in rest)
        state = _absorb(state, in_round, policy)


def _absorb(state: RaceState, found: Sequence[Launch], policy: Policy) -> RaceState:
    s = state.settings
    r = state.round + 1
    spent = state.gpu_seconds + sum(x.gpu_seconds for x in found if x.phase is not Phase.STRATEGY)
    if state.planned_phase is Phase.EFFECT and r > 0:
        effect, failures = dict(state.effect), dict(state.effect_failures)
        for x in found:
            if x.value is not None and x.load == s.load:
                effect[x.config] = (*effect.get(x.config, ()), x.value)
            failures[x.config] = failures.get(x.config, 0) + x.counts_as_failure
        state = replace(state, round=r, effect=effect, effect_failures=failures, gpu_seconds=spent)
        return replace(state, planned=plan_effect(state))
    contenders = tuple(
        _add(c, [x for x in found if x.config == c.key], s) for c in state.contenders
    )
    state = replace(state, round=r, contenders=contenders, gpu_seconds=round(spent, 3))
    if state.outcome is Outcome.RACING:
        state = _decide(_look(state))
    if state.outcome is Outcome.RACING:
        return replace(state, planned=policy(state), planned_phase=Phase.RACE)
    return replace(state, planned=plan_effect(state), planned_phase=Phase.EFFECT)


def _add(c: Contender, found: Sequence[Launch], s: Settings) -> Contender:
    values, numbers, ratios = list(c.values), list(c.launches), dict(c.ratios)
    blocks = list(c.blocks)
    missed, failures = c.missed, c.failures
    for x in found:
        failures += x.phase is Phase.RACE and x.counts_as_failure
        if x.value is None or x.load != s.load or x.rung != s.rung:
            continue
        values.append(x.value)
        blocks.append(x.blocks)
        numbers.append(x.number)
        missed += x.missed
        for name, ratio in x.slo_ratios.items():
            ratios[name] = (*ratios.get(name, ()), ratio)
    status = c.status
    if status is Status.RACING and failures >= MAX_FAILED:
        status = Status.FAILED
    first = numbers[0] if numbers else c.first
    return replace(
        c,
        first=first,
        status=status,
        values=tuple(values),
        blocks=tuple(blocks),
        launches=tuple(numbers),
        ratios=ratios,
        missed=missed,
        failures=failures,
    )


def shown_to_miss(c: Contender, level: float) -> Judgement | None:
    """The judgement that ``c`` misses an SLO at the race's load (some SLO's value / limit
    worse than 1 over its launches, one-sided at ``level``), else None."""
    for ratios in c.ratios.values():
        if len(ratios) < 2 or len(ratios) != len(c.values):
            continue
        estimate = log_contrast([(1.0, Cell(ratios))])  # log of the mean ratio against 0
        j = judge_pair(
            estimate,
            SLO_RATIO,
            margin=0.0,
            confidence=1.0 - 2.0 * level,
            launches=(len(ratios), len(ratios)),
        )
        if j.verdict is Verdict.WORSE:
            return j
    return None


def _look(state: RaceState) -> RaceState:
    """One look, when the fewest launches of a racing contender has grown since the last."""
    s = state.settings
    live = state.racing
    if not live:
        return state
    fewest = min(len(c.values) for c in live)
    if fewest < 2 or fewest <= state.looked_at or state.looks >= s.looks:
        return state
    # Bonferroni over the challengers and the SLOs: a contender shown to miss is one test
    shown = s.level / (max(1, len(live) - 1) * max(1, s.slos))
    serves = {c.key: shown_to_miss(c, shown) is None for c in state.contenders}
    contenders = tuple(replace(c, serves=serves[c.key]) for c in state.contenders)
    state = replace(state, contenders=contenders)
    while True:  # a status judged against another best is void: that contender races again
        best = state.racing[0]
        stale = {
            c.key
            for c in state.contenders
            if c.status in (Status.SEPARATED, Status.TIED) and c.against != best.key
        }
        if not stale:
            break
        state = replace(
            state,
            contenders=tuple(
                replace(c, status=Status.RACING, against=None) if c.key in stale else c
                for c in state.contenders
            ),
        )
    live = state.racing
    best, others = live[0], live[1:]
    judged = _family(best, others, s)
    new = []
    for c in state.contenders:
        j = judged.get(c.key)
        if j is None:
            new.append(c)
            continue
        status = Status.RACING
        if best.serves and not c.serves:
            status = Status.SEPARATED  # it cannot serve the load the best serves
        elif j.verdict is Verdict.TIE:
            status = Status.TIED
        elif j.verdict is Verdict.BETTER:
            status = Status.SEPARATED
        new.append(replace(c, status=status, against=best.key, judgement=j))
    return replace(
        state,
        contenders=tuple(new),
        best=best.key,
        looks=state.looks + 1,
        looked_at=min(len(c.values) for c in live),
    )


def pair_estimate(
    best: Contender,
    other: Contender,
    pool: Sequence[Contender],
    prior: variance.Prior | None = None,
) -> Estimate | None:
    """``best`` against ``other``: over launches (``intervals.contrast``), or, where every launch
    of the contenders in ``pool`` was measured in blocks, by the variance components fitted over
    them (``variance.contrast``: the launches stay the unit; blocks count as replicates only
    where the launch noise is shown negligible, or with ``prior`` unless its launches
    contradict it), so a race judges with the right standard error (issue 44)."""
    pool = [c for c in pool if c.values]
    measured = all(len(c.blocks) == len(c.values) for c in pool) and all(
        len(b) >= 2 for c in pool for b in c.blocks
    )
    if measured and {best.key, other.key} <= {c.key for c in pool}:
        data = [variance.Launch(c.key, b) for c in pool for b in c.blocks]
        components = variance.fit(data, prior)
        if components is not None:
            return variance.contrast(components, data, best.key, other.key)
    return contrast(best.values, other.values)


def _family(best: Contender, others: Sequence[Contender], s: Settings) -> dict[str, Judgement]:
    """The best against each other racing contender, one Holm family at the look's level."""
    pairs = [(c, pair_estimate(best, c, [best, *others], s.prior)) for c in others]
    known = [(c, e) for c, e in pairs if e is not None]
    adjusted = adjust([e.p_value() for _, e in known], Method.HOLM)
    order = sorted(range(len(known)), key=lambda i: known[i][1].p_value())
    m = len(others)
    out: dict[str, Judgement] = {}
    for rank, i in enumerate(order):
        c, estimate = known[i]
        confidence = 1.0 - s.level / max(1, m - rank)  # Holm's step for this one
        out[c.key] = judge_pair(
            estimate,
            s.metric,
            margin=s.margin,
            confidence=confidence,
            launches=(len(best.values), len(c.values)),
            discovered=adjusted[i] <= s.level,
        )
    return out


def _decide(state: RaceState) -> RaceState:
    s = state.settings
    live = state.racing
    if live:
        state = replace(state, best=live[0].key)
    if len(live) <= 1:
        against = state.best
        done = [c for c in state.contenders if c.against == against and c.key != against]
        if any(c.status is Status.TIED for c in done):
            return replace(state, outcome=Outcome.TIE)
        if any(c.status is Status.SEPARATED for c in done):
            return replace(state, outcome=Outcome.BETTER)
        return replace(state, outcome=Outcome.ALONE)
    fewest = min(len(c.values) for c in live)
    spent = s.confirm_seconds > 0 and state.gpu_seconds >= s.confirm_seconds
    if fewest >= s.confirm or spent or state.round >= s.max_rounds or s.confirm == 0:
        return replace(state, outcome=Outcome.UNDECIDED)
    return state


def needed(state: RaceState) -> int | None:
    """Launches per contender that would decide the best against the runner-up at the spread
    seen (an undecided race's hint)."""
    best, runner = state.get(state.best or ""), state.runner_up
    if best is None or runner is None:
        return None
    j = versus(state, runner)
    return None if j is None else j.needed


def versus(state: RaceState, other: Contender) -> Judgement | None:
    """The best against ``other``: the judgement that set ``other``'s status against this best
    (the comparison that separated or tied it, at its look), else one over their launches now at
    one look's level."""
    best = state.get(state.best or "")
    if best is None:
        return None
    if other.judgement is not None and other.against == best.key:
        return other.judgement
    s = state.settings
    pool = [best, *[c for c in state.racing if c.key != best.key]]
    found = pair_estimate(best, other, pool, s.prior)
    j = judge_pair(
        found,
        s.metric,
        margin=s.margin,
        confidence=1.0 - s.level,
        launches=(len(best.values), len(other.values)),
        discovered=False,
    )
    return j


def effect(state: RaceState) -> Judgement | None:
    """The best against the default over the fresh launches (95 %, judged alone); None until
    both have launches, or when there is none to make."""
    default, best = state.settings.default, state.best
    if default is None or best is None or best == default:
        return None
    mine, theirs = state.effect.get(best, ()), state.effect.get(default, ())
    s = state.settings
    return judge_pair(
        contrast(mine, theirs),
        s.metric,
        margin=s.margin,
        confidence=1.0 - s.alpha,
        launches=(len(mine), len(theirs)),
    )
