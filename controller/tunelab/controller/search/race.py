"""Racing the top of a search: the stored trials in, the race's standing out (DESIGN.md,
"Answers"). The race itself is the pure state machine ``tunelab.analysis.race`` (its docstring
states the rules); this adapter only picks its field from the strategy's ranking, turns each
stored trial into a launch record (:func:`launch_of`, the one place that reads a trial as
evidence) and the race's asks into proposals.

Challengers are the strategy's runner-up (always: the answer is judged against it) and its next
best configurations whose objective lies within ``SCREEN`` of the incumbent's, at most
``MAX_CHALLENGERS`` in all. Everything here is a pure function of the stored trials, so a
restarted controller replays the same looks and reaches the same answer.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tunelab.analysis import noise
from tunelab.analysis import race as machine
from tunelab.analysis.evidence import Launch, Phase
from tunelab.analysis.judge import Judgement
from tunelab.analysis.metrics import lookup
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import Proposal, key
from tunelab.controller.search.trials import CLIENT_LIMITED
from tunelab.controller.store.search_models import TrialRow

MAX_CHALLENGERS = 3
SCREEN = 0.25  # a challenger's objective within 25 % of the incumbent's enters the race
MAX_FAILED = machine.MAX_FAILED

# the race's outcome (an Outcome is a str: these compare equal to its values)
BETTER, TIE, UNDECIDED, RACING, ALONE = "better", "tie", "undecided", "racing", "alone"
# an entry's status
IN_RACE, SEPARATED, TIED, FAILED = "racing", "separated", "tied", "failed"
_FAILED_STATES = ("FAILED", "CANCELLED", "SKIPPED")  # SKIPPED: refused at creation


def phase(t: TrialRow) -> Phase:
    """Why the trial was launched (its column)."""
    return Phase(t.phase)


def is_race(t: TrialRow) -> bool:
    return phase(t) in (Phase.RACE, Phase.EFFECT)


def is_fixed_load(t: TrialRow) -> bool:
    """A launch at a load it was given (the race's, an effect's or a drift launch of the
    default), not a trial of the strategy's: no ranking, trial budget or strategy sees it."""
    return phase(t).fixed_load


def launch_value(t: TrialRow) -> float | None:
    """One launch's value: the mean of its answer points (None: failed or no load met)."""
    if t.state != "DONE" or t.objective is None:
        return None
    return statistics.fmean(t.samples) if t.samples else t.objective


def launch_of(t: TrialRow) -> Launch:
    """A stored trial as a launch record (its evidence columns, migration 0009)."""
    return Launch(
        number=t.number,
        config=key(t.params),
        phase=phase(t),
        round=t.race_round,
        rung=t.rung,
        load=t.load,
        value=launch_value(t),
        slo_ratios=t.slo_ratios,
        host=t.host,
        failed=t.state in _FAILED_STATES,
        client_limited=t.failure_reason in CLIENT_LIMITED,
        running=t.state == "RUNNING",
        gpu_seconds=t.gpu_seconds or 0.0,
        blocks=tuple(float(b) for b in t.details.get("blocks") or ()),
    )


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


@dataclass(frozen=True)
class Entry:
    """A contender as the answer shows it: the machine's contender and its parameters."""

    key: str
    params: dict[str, Any]
    trial: int  # its first launch at the race's load (else its latest trial)
    status: str
    values: tuple[float, ...] = ()
    launches: tuple[int, ...] = ()
    missed: int = 0  # of those launches, how many missed an SLO at the race's load
    judgement: Judgement | None = None  # the comparison that set its status, against the best

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None


@dataclass
class Standings:
    """Where the race stands, replayed from the stored trials."""

    verdict: str  # BETTER, TIE, UNDECIDED, RACING, ALONE; "" when nothing is feasible
    state: machine.RaceState | None = None
    load: dict[str, float] | None = None
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: list[Proposal] = field(default_factory=list)  # this round's launches not queued
    running: int = 0  # launches of the race in flight

    @property
    def settled(self) -> bool:
        """Nothing more to launch: the search may end with this answer."""
        return self.verdict != RACING and not (self.pending or self.running)

    def entry(self, c: machine.Contender | None) -> Entry | None:
        if c is None:
            return None
        return Entry(
            c.key,
            self.params[c.key],
            c.first,
            c.status.value,
            c.values,
            c.launches,
            c.missed,
            c.judgement,
        )

    @property
    def entries(self) -> dict[str, Entry]:
        cs = self.state.contenders if self.state else ()
        return {c.key: e for c in cs if (e := self.entry(c)) is not None}

    @property
    def best(self) -> Entry | None:
        return self.entry(self.state.get(self.state.best or "")) if self.state else None

    @property
    def runner_up(self) -> Entry | None:
        return self.entry(self.state.runner_up) if self.state else None

    @property
    def tied_with(self) -> list[Entry]:
        best = self.state.best if self.state else None
        return [
            e
            for c in (self.state.contenders if self.state else ())
            if c.status is machine.Status.TIED
            and c.against == best
            and (e := self.entry(c)) is not None
        ]

    @property
    def rounds(self) -> int:
        return max(0, self.state.round) if self.state else 0

    @property
    def gpu_seconds(self) -> float:
        return self.state.gpu_seconds if self.state else 0.0

    @property
    def needed(self) -> int | None:
        if self.state is None or self.verdict != UNDECIDED:
            return None
        return machine.needed(self.state)

    @property
    def effect(self) -> Judgement | None:
        return machine.effect(self.state) if self.state else None


def settings(
    spec: SearchSpec, load: tuple[str, float] | None, rung: int, default: str | None
) -> machine.Settings:
    return machine.Settings(
        lookup(spec.objective),
        spec.margin,
        spec.confirm_launches,
        load,
        rung,
        spec.confirm_seconds or 0.0,
        len(spec.slo),
        default,
        prior=None if spec.noise is None else noise.declared(*spec.noise),
    )


def standings(spec: SearchSpec, trials: Sequence[TrialRow]) -> Standings:
    """The race replayed from the stored trials: where it stands, and what to launch next."""
    ranked = ranking(spec, trials)
    if not ranked:
        return Standings("")
    incumbent = ranked[0]
    load = incumbent.latest.load
    near = [r for r in ranked[2:] if _within(spec, r.score, incumbent.score)]
    field_ = [*ranked[:2], *near[: MAX_CHALLENGERS - 1]]
    params = {r.key: r.params for r in field_}
    default_key = key(spec.default_params)
    own = [t for t in trials if key(t.params) == default_key and not is_fixed_load(t)]
    default = default_key if any(t.state == "DONE" for t in own) else None
    params.setdefault(default_key, dict(spec.default_params))
    start = machine.start(
        settings(spec, load, incumbent.rung, default), [(r.key, r.latest.number) for r in field_]
    )
    launches = [launch_of(t) for t in trials]
    here = [x for x in launches if x.phase is not Phase.STRATEGY or x.config in params]
    state, asks = machine.step(start, [x for x in here if not x.phase.value.startswith("drift")])
    st = Standings(state.outcome.value, state, None if load is None else {load[0]: load[1]})
    st.params = params
    st.running = sum(1 for t in trials if is_race(t) and t.state == "RUNNING")
    st.pending = [
        Proposal(
            params[a.config],
            incumbent.rung,
            load=st.load,
            race=a.round,
            effect=a.phase is Phase.EFFECT,
        )
        for a in asks
    ]
    if load is None:  # no load to race at: the strategy's answer stands as it is
        st.verdict, st.pending = (ALONE if len(field_) == 1 else UNDECIDED), []
    return st


def _within(spec: SearchSpec, score: float, incumbent: float) -> bool:
    """A challenger's objective within SCREEN of the incumbent's (it may still be the best)."""
    if spec.maximize:
        return score >= incumbent * (1.0 - SCREEN)
    return score <= incumbent / (1.0 - SCREEN)


def versus(st: Standings, other: Entry) -> Judgement | None:
    """The best against ``other``: the comparison that separated or tied it (at its look's
    confidence), else over their launches now at one look's level."""
    if st.state is None:
        return None
    c = st.state.get(other.key)
    return None if c is None else machine.versus(st.state, c)
