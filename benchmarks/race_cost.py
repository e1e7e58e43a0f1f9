"""What a decided race costs: today's race, a grid of 3 launches a point, and the race that
allocates blocks and launches by cost (tunelab.analysis.variance and .allocation), on two
contenders whose launches vary by ``between`` and whose blocks vary by ``within``.

A block is ``BLOCK_S`` seconds of measurement; today's launch measures ``TODAY_BLOCKS`` of them
(its value is their mean, so blocks are invisible to it) after its load. The contenders' true
levels are 1 and ``1 - gap``; every launch draws a log-normal level (CV ``between``) and every
block a log-normal noise around it (CV ``within``). One agent: one server up at a time.

Every method starts from one launch of each contender at today's length (the strategy's, which
today's race starts from too); "race GPU-s" is what a method spends beyond them.

- **today**: the product's race (``race.standings``) from one launch each (the strategy's), a
  round of launches at a time, at most ``confirm`` 6 launches each;
- **grid x3**: 3 launches each, judged once (``judge_pair`` at 95 %);
- **allocated**: the race of issue 44 (``tunelab.analysis.blockrace``): after each look, the
  allocation's steps (more blocks on the running launch, or new launches of the nested-design
  optimum's length) until its forecast would decide, at most doubling what was spent and
  within today's GPU time; 5 looks at most, Bonferroni over them (as today's); judged by
  ``judge_pair`` on the variance-components contrast. *no profile*: the first search on a host
  class; *profile*: a remembered profile of 20 launch degrees of freedom (its between variance
  drawn as an earlier search would have estimated it, chi-square over 20).

Figures are simulated seconds (the same on any machine).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunelab.analysis import blockrace
from tunelab.analysis.allocation import Costs
from tunelab.analysis.intervals import ALPHA, contrast
from tunelab.analysis.judge import Verdict, judge_pair
from tunelab.analysis.metrics import lookup
from tunelab.analysis.variance import Prior, cv_to_var
from tunelab.controller.search import race
from tunelab.controller.search.space import SearchSpec, parse_search
from tunelab.controller.states import TrialState
from tunelab.controller.store.search_models import TrialRow

BLOCK_S = 20.0
TODAY_BLOCKS = 3
CONFIRM = 6
MARGIN = 0.02
METRIC = lookup("output_throughput")
BETWEEN = (0.003, 0.03, 0.10)
WITHIN = (0.02, 0.10)
LOAD_S = (5.0, 600.0)
GAPS = {"runner-up 10 % below": 0.10, "0.3 % apart": 0.003, "A/A": 0.0}
PARAM = "server.flags.--x"


@dataclass(frozen=True)
class Cell:
    between: float
    within: float
    load_s: float

    @property
    def today_launch_s(self) -> float:
        return self.load_s + TODAY_BLOCKS * BLOCK_S

    @property
    def today_budget(self) -> float:
        return 2 * CONFIRM * self.today_launch_s


@dataclass(frozen=True)
class Outcome:
    verdict: str  # better, tie, undecided
    best: str  # "a" (the true best) or "b"
    gpu_s: float
    launches: int


class Engine:
    """Draws launches and blocks of the two contenders."""

    def __init__(self, cell: Cell, gap: float, rng: random.Random) -> None:
        self.rng = rng
        self.sb = math.sqrt(cv_to_var(cell.between))
        self.sw = math.sqrt(cv_to_var(cell.within))
        self.level = {"a": 0.0, "b": math.log1p(-gap)}

    def launch(self, config: str) -> float:
        return self.level[config] + self.rng.gauss(-self.sb * self.sb / 2, self.sb)

    def blocks(self, level: float, m: int) -> list[float]:
        return [math.exp(level + self.rng.gauss(-self.sw * self.sw / 2, self.sw)) for _ in range(m)]


def _spec() -> SearchSpec:
    raw = {
        "space": {PARAM: ["a", "b"]},
        "objective": {"maximize": "output_throughput"},
        "load": {"concurrency": [8]},
        "budget": {"trials": 2, "confirm": CONFIRM},
        "margin": MARGIN,
        "strategy": "grid",
    }
    spec, issues = parse_search(raw)
    if spec is None:
        raise SystemExit(f"bad spec: {issues}")
    return spec


SPEC = _spec()


def today(cell: Cell, gap: float, rng: random.Random) -> Outcome:
    """The product's race: one value a launch (the mean of its blocks)."""
    engine = Engine(cell, gap, rng)
    trials: list[TrialRow] = []

    def run(config: str, race_round: int) -> None:
        t = TrialRow("g", len(trials) + 1, {PARAM: config}, TrialState.DONE, 0.0, 0, "x")
        value = statistics.fmean(engine.blocks(engine.launch(config), TODAY_BLOCKS))
        t.objective, t.samples = value, [value]
        t.details = {"load": {"concurrency": 8}, "gpu_seconds": cell.today_launch_s}
        if race_round:
            t.details["race"] = race_round
        trials.append(t)

    run("a", 0)
    run("b", 0)
    while True:
        st = race.standings(SPEC, trials)
        if st.settled:
            break
        for proposal in st.pending:
            run(str(proposal.params[PARAM]), proposal.race)
    best = "a" if st.best is None else str(st.best.params[PARAM])
    verdict = {race.ALONE: "better"}.get(st.verdict, st.verdict)
    return Outcome(verdict, best, len(trials) * cell.today_launch_s, len(trials))


def grid3(cell: Cell, gap: float, rng: random.Random) -> Outcome:
    engine = Engine(cell, gap, rng)
    values = {
        k: [statistics.fmean(engine.blocks(engine.launch(k), TODAY_BLOCKS)) for _ in range(3)]
        for k in ("a", "b")
    }
    best = max(values, key=lambda k: statistics.fmean(values[k]))
    other = "b" if best == "a" else "a"
    j = judge_pair(
        contrast(values[best], values[other]),
        METRIC,
        margin=MARGIN,
        confidence=1 - ALPHA,
        launches=(3, 3),
    )
    return Outcome(_word(j.verdict), best, 6 * cell.today_launch_s, 6)


def _word(v: Verdict) -> str:
    return {Verdict.BETTER: "better", Verdict.TIE: "tie"}.get(v, "undecided")


def allocated(cell: Cell, gap: float, rng: random.Random, prior: Prior | None) -> Outcome:
    """The allocated race (``blockrace.race``) from one launch of each at today's length."""
    engine = Engine(cell, gap, rng)
    levels: dict[str, float] = {}

    def measure(config: str, extend: bool, m: int) -> list[float]:
        if not extend:
            levels[config] = engine.launch(config)
        return engine.blocks(levels[config], m)

    first = {k: measure(k, False, TODAY_BLOCKS) for k in ("a", "b")}
    settings = blockrace.Settings(
        Costs(cell.load_s, BLOCK_S),
        cell.today_budget - 2 * cell.today_launch_s,
        margin=MARGIN,
        looks=CONFIRM - 1,
        prior=prior,
    )
    out = blockrace.race(first, measure, settings)
    verdict = "undecided" if out.judgement is None else _word(out.judgement.verdict)
    launches = sum(len(v) for v in out.launches.values())
    return Outcome(verdict, out.best, out.spent + 2 * cell.today_launch_s, launches)


def profile(cell: Cell, rng: random.Random, df: float = 20.0) -> Prior:
    """A remembered profile: the true components as an earlier search would have estimated them."""
    scale = rng.gammavariate(df / 2, 2.0) / df
    return Prior(cv_to_var(cell.between) * scale, cv_to_var(cell.within), df)


def cost_table(seeds: int) -> list[str]:
    lines = [
        (
            f"the race's cost to a decision ({seeds} seeds a cell; margin 2 %; block "
            f"{BLOCK_S:.0f} s, today's launch {TODAY_BLOCKS} blocks; GPU-s mean over the seeds):"
        ),
        (
            "| launch CV | within CV | load | runner-up | method | right winner | tie (holds it) "
            "| undecided | wrong 'better' | launches | GPU-s | vs today | race GPU-s | vs today |"
        ),
        "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for between in BETWEEN:
        for within in WITHIN:
            for load in LOAD_S:
                cell = Cell(between, within, load)
                for name, gap in GAPS.items():
                    lines += _rows(cell, name, gap, seeds)
    return lines


def _rows(cell: Cell, name: str, gap: float, seeds: int) -> list[str]:
    methods: dict[str, Callable[[random.Random], Outcome]] = {
        "today": lambda rng: today(cell, gap, rng),
        "grid x3": lambda rng: grid3(cell, gap, rng),
        "allocated, no profile": lambda rng: allocated(cell, gap, rng, None),
        "allocated, profile": lambda rng: allocated(cell, gap, rng, profile(cell, rng)),
    }
    base = race_base = 0.0
    out = []
    for method, run in methods.items():
        runs: Sequence[Outcome] = [run(random.Random(seed * 1009 + 17)) for seed in range(seeds)]
        gpu = statistics.fmean(r.gpu_s for r in runs)
        race_gpu = gpu - 2 * cell.today_launch_s  # beyond the strategy's launch of each
        base, race_base = base or gpu, race_base or race_gpu
        right = sum(r.verdict == "better" and r.best == "a" for r in runs) / seeds
        tie = sum(r.verdict == "tie" for r in runs) / seeds
        undecided = sum(r.verdict == "undecided" for r in runs) / seeds
        # wrong: the worse called better (where they differ by more than the margin), or any
        # 'better' between identical twins (A/A)
        wrong = (
            sum(
                r.verdict == "better" and (gap == 0.0 or (r.best == "b" and gap > MARGIN))
                for r in runs
            )
            / seeds
        )
        out.append(
            f"| {cell.between:.1%} | {cell.within:.0%} | {cell.load_s:.0f} s | {name} | {method} "
            f"| {right:.0%} | {tie:.0%} | {undecided:.0%} | {wrong:.1%} "
            f"| {statistics.fmean(r.launches for r in runs):.1f} | {gpu:,.0f} | {gpu / base:.0%} "
            f"| {race_gpu:,.0f} | {race_gpu / max(race_base, 1e-9):.0%} |"
        )
    return out


if __name__ == "__main__":
    print("\n".join(cost_table(int(sys.argv[1]) if len(sys.argv) > 1 else 20)))
