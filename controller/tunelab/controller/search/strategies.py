"""Search strategies: pure functions of the stored trials (ask → proposals; the results are told
by being in the history the next ask reads). No strategy keeps state of its own between asks,
so a restarted controller asks the same strategy over the same stored trials and goes on where
the killed one stopped; proposals are deterministic given the seed and the history.

Every strategy proposes the space's first (default) point first, so the answer always has its
effect against the default.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tunelab.analysis.intervals import positive_interval
from tunelab.controller.search.space import Param, SearchSpec, ask_seed

RANDOM_TRIES = 200  # draws to find an unseen point before a finite space counts as seen


@dataclass(frozen=True)
class TrialView:
    """What a strategy knows of one trial."""

    number: int
    params: dict[str, Any]
    rung: int
    state: str  # RUNNING, DONE, FAILED, SKIPPED, CANCELLED
    objective: float | None = None  # this launch's value; None: failed, skipped or no load met
    samples: tuple[float, ...] = ()  # the answer points of this one launch

    @property
    def finished(self) -> bool:
        return self.state != "RUNNING"


@dataclass(frozen=True)
class Proposal:
    params: dict[str, Any]
    rung: int = 0
    load: dict[str, float] | None = None  # a launch of the race: this fixed load
    race: int = 0  # a launch of the race: its round (race.py)
    drift: str = ""  # a drift launch of the default: "start" or "end" (drift.py)
    effect: bool = False  # a fresh launch of the best or the default, for the answer's effect


@dataclass(frozen=True)
class Ask:
    proposals: list[Proposal] = field(default_factory=list)
    exhausted: bool = False  # nothing more will be proposed, whatever finishes


class Strategy(Protocol):
    def ask(self, spec: SearchSpec, history: Sequence[TrialView], slots: int) -> Ask: ...


def key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def finite_size(spec: SearchSpec) -> int | None:
    """Points in the space, or None where a float range makes it unbounded."""
    size = 1
    for p in spec.space:
        if p.kind == "float":
            return None
        size *= len(p.values) if p.kind == "choice" else int(p.high - p.low) + 1
    return size


def sample(param: Param, rng: random.Random) -> Any:
    if param.kind == "choice":
        return param.values[rng.randrange(len(param.values))]
    if param.log:
        value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
    else:
        value = rng.uniform(param.low, param.high)
    if param.kind == "int":
        return min(int(param.high), max(int(param.low), round(value)))
    return round(value, 6)


class Grid:
    """Every point of the space in order (ranges spread over ``grid_points`` values)."""

    def ask(self, spec: SearchSpec, history: Sequence[TrialView], slots: int) -> Ask:
        seen = {key(t.params) for t in history}
        axes = [[(p.path, v) for v in p.grid(spec.grid_points)] for p in spec.space]
        out: list[Proposal] = []
        for combo in itertools.product(*axes):
            params = dict(combo)
            if key(params) in seen:
                continue
            if len(out) == slots:
                return Ask(out)
            out.append(Proposal(params))
        return Ask(out, exhausted=True)


class RandomSearch:
    """The default point, then uniform draws (log-uniform on log ranges), never a point twice."""

    def ask(self, spec: SearchSpec, history: Sequence[TrialView], slots: int) -> Ask:
        seen = {key(t.params) for t in history}
        out: list[Proposal] = []
        if key(spec.default_params) not in seen and slots:
            out.append(Proposal(spec.default_params))
            seen.add(key(spec.default_params))
        rng = random.Random(spec.seed * 1_000_003 + len(history))
        size = finite_size(spec)
        while len(out) < slots:
            if size is not None and len(seen) >= size:
                return Ask(out, exhausted=True)
            for _ in range(RANDOM_TRIES):
                params = {p.path: sample(p, rng) for p in spec.space}
                if key(params) not in seen:
                    break
            else:
                return Ask(out, exhausted=True)
            seen.add(key(params))
            out.append(Proposal(params))
        return Ask(out)


def launch_value(t: TrialView) -> float | None:
    """One launch's value: the mean of its answer points (None: failed or no load met)."""
    if t.objective is None:
        return None
    return statistics.fmean(t.samples) if t.samples else t.objective


class SuccessiveHalving:
    """Rung 0: n candidates, one short launch each. Each later rung, up to the last the budget
    allows (``rungs``), keeps the best 1/η of the candidates that ran the rung before, by the
    mean over their launches (OOM'd, failed and infeasible ones are not candidates; at least one
    survives), gives each one more launch with η times the benchmark length, and drops any whose
    upper 95 % bound over its launches is below the incumbent's lower bound. Rungs are
    synchronous: a rung starts when every launch of the one before ended."""

    @staticmethod
    def rungs(spec: SearchSpec) -> int:
        """The last rung: n + n/η + ... + n/η^rungs launches fit the trial budget."""
        return max(1, math.floor(math.log(max(spec.max_trials, 1), spec.eta)))

    def candidates(self, spec: SearchSpec) -> list[dict[str, Any]]:
        """Rung 0's candidates: the whole space where it fits, else the default plus draws."""
        eta = spec.eta
        # n + n/η + n/η² + ... <= budget
        n = max(1, math.floor(spec.max_trials / sum(eta**-r for r in range(self.rungs(spec) + 1))))
        size = finite_size(spec)
        if size is not None and size <= n:
            return [p.params for p in Grid().ask(spec, [], size).proposals]
        rng = random.Random(spec.seed)
        out = {key(spec.default_params): spec.default_params}
        for _ in range(n * RANDOM_TRIES):
            if len(out) >= n:
                break
            params = {p.path: sample(p, rng) for p in spec.space}
            out.setdefault(key(params), params)
        return list(out.values())

    def ask(self, spec: SearchSpec, history: Sequence[TrialView], slots: int) -> Ask:
        by_key: dict[str, list[TrialView]] = {}
        for t in history:
            by_key.setdefault(key(t.params), []).append(t)
        members = self.candidates(spec)
        rung = 0
        while True:
            asked = {key(t.params) for t in history if t.rung == rung}
            todo = [m for m in members if key(m) not in asked]
            if todo:
                return Ask([Proposal(m, rung) for m in todo[:slots]])
            if any(not t.finished for t in history if t.rung == rung):
                return Ask()  # the rung is still running
            if rung >= self.rungs(spec):
                return Ask(exhausted=True)  # the last rung the budget allows has run
            promoted = self.promote(spec, members, by_key, rung)
            if not promoted:
                return Ask(exhausted=True)  # no candidate met the SLOs: nothing to promote
            members, rung = promoted, rung + 1

    @staticmethod
    def promote(
        spec: SearchSpec,
        members: list[dict[str, Any]],
        by_key: dict[str, list[TrialView]],
        rung: int,
    ) -> list[dict[str, Any]]:
        """The candidates of rung ``rung + 1``: at least one while any met the SLOs."""

        def launches(params: dict[str, Any]) -> list[float]:
            found = (launch_value(t) for t in by_key.get(key(params), []) if t.rung <= rung)
            return [v for v in found if v is not None]

        scored = []
        for m in members:
            at_rung = [t for t in by_key.get(key(m), []) if t.rung == rung]
            if at_rung and all(launch_value(t) is not None for t in at_rung):
                values = launches(m)
                scored.append((statistics.fmean(values), m, positive_interval(values)))
        if not scored:
            return []
        scored.sort(key=lambda s: s[0], reverse=spec.maximize)
        keep = scored[: max(1, math.ceil(len(scored) / spec.eta))]
        incumbent = keep[0][2]
        if incumbent is not None:
            lo, hi = incumbent
            keep = [keep[0]] + [
                s
                for s in keep[1:]
                if s[2] is None or not (s[2][1] < lo if spec.maximize else s[2][0] > hi)
            ]
        return [s[1] for s in keep]


class Tpe:
    """Optuna's TPE sampler over ask/tell. The study lives in memory only: each ask rebuilds it
    from the stored trials (finished ones told with their value, running ones as RUNNING so the
    constant-liar sampler steers away from them); the store stays the record."""

    def ask(self, spec: SearchSpec, history: Sequence[TrialView], slots: int) -> Ask:
        try:
            import optuna  # an optional extra: tunelab[search]
        except ImportError:
            raise RuntimeError(
                "strategy tpe needs Optuna on the controller: pip install 'tunelab[search]'"
            ) from None
        from optuna.distributions import (
            BaseDistribution,
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        dists: dict[str, BaseDistribution] = {}
        for p in spec.space:
            if p.kind == "choice":
                dists[p.path] = CategoricalDistribution(list(p.values))
            elif p.kind == "int":
                dists[p.path] = IntDistribution(int(p.low), int(p.high), log=p.log)
            else:
                dists[p.path] = FloatDistribution(p.low, p.high, log=p.log)
        sampler = optuna.samplers.TPESampler(
            seed=ask_seed(spec.seed, len(history)),
            constant_liar=True,
            n_startup_trials=min(10, max(2, spec.max_trials // 4)),
        )
        study = optuna.create_study(
            direction="maximize" if spec.maximize else "minimize", sampler=sampler
        )
        seen = set()
        for t in history:
            seen.add(key(t.params))
            params = {k: v for k, v in t.params.items() if k in dists}
            if t.state == "RUNNING":
                state, value = optuna.trial.TrialState.RUNNING, None
            elif t.objective is not None:
                state, value = optuna.trial.TrialState.COMPLETE, t.objective
            else:
                state, value = optuna.trial.TrialState.FAIL, None
            study.add_trial(
                optuna.trial.create_trial(
                    params=params, distributions=dists, value=value, state=state
                )
            )
        out: list[Proposal] = []
        if key(spec.default_params) not in seen and slots:
            out.append(Proposal(spec.default_params))
            seen.add(key(spec.default_params))
            study.enqueue_trial(spec.default_params)
            study.ask(dists)  # the default, as RUNNING, so later asks steer away from it
        size = finite_size(spec)
        while len(out) < slots:
            if size is not None and len(seen) >= size:
                return Ask(out, exhausted=True)
            for _ in range(RANDOM_TRIES // 10):
                trial = study.ask(dists)
                params = {p.path: trial.params[p.path] for p in spec.space}
                if key(params) not in seen:
                    break
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                return Ask(out, exhausted=size is not None or not out)  # nothing new to try
            seen.add(key(params))
            out.append(Proposal(params))
        return Ask(out)


def strategy_for(name: str) -> Strategy:
    strategies: dict[str, Strategy] = {
        "grid": Grid(),
        "random": RandomSearch(),
        "successive-halving": SuccessiveHalving(),
        "tpe": Tpe(),
    }
    return strategies[name]
