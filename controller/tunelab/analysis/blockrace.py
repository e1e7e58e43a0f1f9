"""The allocated race between two contenders, driven: look, judge, plan, measure, again.

Pure: the measuring is passed in (``measure(config, extend, blocks)`` returns the new blocks'
values: on a running launch when ``extend``, else on a new launch), so the simulation of
``benchmarks/race_cost.py`` and the tests drive the same loop the product's race will.

Each look fits the variance components (``variance.fit``, with the prior where one is given;
a prior is judged by only once one contender has a second launch, which could contradict it),
judges the best by mean against the other with ``judge_pair`` on the model's contrast, at a
Bonferroni share of alpha over at most ``looks`` looks (as today's race). Undecided, it asks the
allocation for the steps its forecast says would decide, aiming ``aim`` inside the edge (the
half-width that would exclude 0, or fit inside the margin), at most doubling what was spent so
far (a forecast from few launches is rough), never past the budget; one agent runs them, each
side's steps back to back, the side whose server is up first, so it extends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tunelab.analysis import allocation, variance
from tunelab.analysis.allocation import Costs, Side, Step
from tunelab.analysis.intervals import ALPHA, Estimate
from tunelab.analysis.judge import Judgement, judge_pair
from tunelab.analysis.metrics import Metric, lookup
from tunelab.analysis.variance import Components, Launch, Prior, cv_to_var

Measure = Callable[[str, bool, int], Sequence[float]]
GUESS = Prior(cv_to_var(0.03), cv_to_var(0.05), 0.0)  # plans the first steps without a prior


@dataclass(frozen=True)
class Settings:
    costs: Costs
    budget: float  # GPU-seconds the race may spend beyond the first launches
    margin: float = 0.02
    looks: int = 5
    prior: Prior | None = None
    guess: Prior = GUESS
    aim: float = 0.75
    metric: Metric = field(default_factory=lambda: lookup("output_throughput"))

    @property
    def confidence(self) -> float:
        return 1.0 - ALPHA / self.looks


@dataclass
class Outcome:
    judgement: Judgement | None  # None: never judgeable (no launch degree of freedom)
    best: str
    other: str
    components: Components | None
    spent: float  # GPU-seconds beyond the first launches
    launches: dict[str, list[list[float]]]  # per contender, each launch's block values
    contradicted: bool = False  # the prior was contradicted and left out
    needed: tuple[float, int] | None = None  # undecided: GPU-seconds and launches to decide


def race(first: Mapping[str, Sequence[float]], measure: Measure, settings: Settings) -> Outcome:
    """Race the two contenders of ``first`` (each one's first launch, the last one still up)."""
    if len(first) != 2:
        raise ValueError(f"the allocated race takes two contenders, got {len(first)}")
    launches = {k: [list(v)] for k, v in first.items()}
    up = list(first)[-1]
    spent, looks, round_number = 0.0, 0, 1
    prior, contradicted = settings.prior, False
    while True:
        data = [Launch(k, tuple(b)) for k, ls in launches.items() for b in ls]
        c = variance.fit(data, prior)
        if c is not None and c.contradicted:  # once contradicted, its own data to the end
            prior, contradicted = None, True
        best, other = _order(c, data, list(launches))
        est = None if c is None else variance.contrast(c, data, best, other)
        if c is not None and c.df_between == 0:
            est = None  # a prior is not judged by until a second launch can contradict it
        judgement = None
        if est is not None:
            looks += 1
            judgement = judge_pair(
                est,
                settings.metric,
                margin=settings.margin,
                confidence=settings.confidence,
                launches=(len(launches[best]), len(launches[other])),
            )
        done = judgement is not None and (judgement.decided or looks >= settings.looks)
        steps = [] if done or c is None else _steps(c, launches, best, up, est, settings, spent)
        if not steps:
            outcome = Outcome(judgement, best, other, c, spent, launches, contradicted)
            if judgement is not None and not judgement.decided and c is not None:
                outcome.needed = _needed(c, launches, best, other, est, settings)
            return outcome
        order = [up] + [k for k in (list(launches)[:: 1 if round_number % 2 else -1]) if k != up]
        for k in order:
            for s in (s for s in steps if s.config == k):
                extend = s.extend and up == k
                values = measure(k, extend, s.blocks)
                if extend:
                    launches[k][-1] += values
                else:
                    launches[k].append(list(values))
                spent += Step(k, extend, s.blocks).cost(settings.costs)
                up = k
        round_number += 1


def _order(c: Components | None, data: Sequence[Launch], keys: list[str]) -> tuple[str, str]:
    if c is None:
        return keys[0], keys[1]
    means = {k: variance.config_mean(c, data, k) for k in keys}
    ranked = sorted(keys, key=lambda k: -(m.value if (m := means[k]) else -math.inf))
    return ranked[0], ranked[1]


def _sides(launches: Mapping[str, list[list[float]]], keys: Sequence[str], up: str) -> list[Side]:
    return [Side(k, tuple(len(b) for b in launches[k]), up == k) for k in keys]


def _target(est: Estimate | None, settings: Settings) -> float:
    effect = abs(est.log_ratio) if est is not None else 0.0
    return max(effect, math.log1p(settings.margin) - effect)


def _steps(
    c: Components,
    launches: Mapping[str, list[list[float]]],
    best: str,
    up: str,
    est: Estimate | None,
    settings: Settings,
    spent: float,
) -> list[Step]:
    planned = allocation.planning(c, settings.guess)
    sides = _sides(launches, (best, *[k for k in launches if k != best]), up)
    room = settings.budget - spent
    if c.df_between == 0:  # the check launch: the side not up repeats its first launch
        again = next(k for k in launches if k != up)
        steps = [Step(again, False, len(launches[again][0]))]
    elif est is None:  # nothing judgeable yet: the round that makes it so
        steps = allocation.plan_round(planned, sides, best, settings.costs, settings.confidence)
    else:
        first = sum(Step(k, False, len(ls[0])).cost(settings.costs) for k, ls in launches.items())
        room = min(room, first + spent)  # at most doubling what was spent
        target = settings.aim * _target(est, settings)
        steps, _ = allocation.plan(
            planned, sides, best, target, settings.costs, settings.confidence, room
        )
    if sum(s.cost(settings.costs) for s in steps) > settings.budget - spent:
        return []
    return steps


def _needed(
    c: Components,
    launches: Mapping[str, list[list[float]]],
    best: str,
    other: str,
    est: Estimate | None,
    settings: Settings,
) -> tuple[float, int] | None:
    a, b = _sides(launches, (best, other), "")
    return allocation.needed(
        allocation.planning(c, settings.guess),
        a,
        b,
        _target(est, settings),
        settings.costs,
        settings.confidence,
    )
