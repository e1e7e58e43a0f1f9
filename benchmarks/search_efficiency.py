"""Search efficiency on the simulator's serving model: which strategy finds the best configuration
under an SLO, with how many trials, simulated GPU-seconds and wall time on 1, 2 and 4 agents.

The surface (5 x 5 x 2 = 50 points; docs/simulator.md has the model):

    server.flags.--max-num-seqs            16 32 64 128 256     (256 > --oom-above-seqs 128: OOM)
    server.flags.--max-num-batched-tokens  512 1024 2048 4096 8192
    server.flags.--step-ms-per-seq         0.3 0.2              (a slower and a faster "backend")

with --step-ms-base 10, --prefill-ms-per-token 0.01, prompts of 512 tokens, 128 output tokens,
concurrency 512 (every candidate saturated), objective output_throughput, SLO itl_p99_ms <= 50.

**The analytic model** (derived here, checked against the simulator's own engine below). With
N = --max-num-seqs, T = --max-num-batched-tokens, S = --step-ms-per-seq, B, P, I, O = C chunks
and T a multiple of I: k = T / I prompts are prefilled per step, so the N slots fill in
m = N / k steps and, in the steady state, each of the m groups of k requests is prefilled once
every C steps (its slots are refilled from the queue the step after it finishes). A period of C
steps has m steps of B + S·N + P·T ms and C - m of B + S·N, so

    throughput = N·O / (C·(B + S·N) + P·N·I)                    tokens per ms
    ITL samples: m·(N - k) gaps of B + S·N + P·T, (C - m)·N gaps of B + S·N per period
    ITL p99    = B + S·N + P·T when m·(N - k) / (N·(C - 1)) > 1 %, else B + S·N

A finite run of R requests is the same schedule started empty and ended when the queue is: the
a-th admission (k requests, the last one the rest) is in step 1 + (a mod m) + (a div m)·C and
holds its slots for C steps; `finite_run` sums that schedule step by step (the ramp and the drain
included), which is what a benchmark of R requests measures. The optimum is the best feasible
point of `finite_run` at the full length.

**The harness** drives the e-search strategies (tunelab.controller.search) as the controller's
driver does: ask with free slots, skip what an OOM implies, pool a candidate's launches. Each
trial is a server start (60 s simulated, an OOM fails at its end) plus its benchmark (the
model's duration, throughput with 1 % seeded noise); agents run trials in a discrete-event
simulation, so GPU-seconds and wall times are simulated seconds, the same on any machine.
Successive halving's rung 0 runs 1/27 of the full length (rung r: 3^r/27). vLLM auto_tune's
method (benchmarks/auto_tune/auto_tune.sh) runs beside: one host, for each pair a server
start, a run at rate inf (1000 prompts), and if the limit fails, rates from int(req/s) + 1
down by 1 (100 prompts each, 5 s pause between runs); its rate runs are simulated with the
simulator's engine in virtual time, Poisson arrivals.

``--real-check`` runs three points of a shorter surface (32 output tokens, concurrency 32) on real
processes, the simulator and ``tunelab bench`` on loopback, beside the analytic figures.

``--cost SEEDS`` prints the race's cost to a decision instead (benchmarks/race_cost.py: today's
race, a grid of 3 launches a point and the race that allocates blocks and launches by cost, at
launch CV 0.3, 3 and 10 %, block CV 2 and 10 %, launches of 5 s and 10 min).

Usage: python benchmarks/search_efficiency.py [--seeds 5] [--check] [--real-check] [--json FILE]
       python benchmarks/search_efficiency.py --cost 200
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import heapq
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunelab.bench.simulator.batching import BatchEngine
from tunelab.bench.simulator.metrics import SimMetrics
from tunelab.bench.simulator.options import SimSettings
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.bench.simulator.timing import LatenessStats
from tunelab.bench.stats import percentile
from tunelab.common.pyexec import python_module_argv
from tunelab.controller.search import race
from tunelab.controller.search.driver import (
    MAX_ASK_ROUNDS,
    best_trial,
    counted,
    implied_oom,
    views,
)
from tunelab.controller.search.space import SearchSpec, parse_search
from tunelab.controller.search.strategies import key, strategy_for
from tunelab.controller.states import TrialState
from tunelab.controller.store.search_models import TrialRow

SEQS = "server.flags.--max-num-seqs"
TOKENS = "server.flags.--max-num-batched-tokens"
PER_SEQ = "server.flags.--step-ms-per-seq"


@dataclass(frozen=True)
class Surface:
    """The space and the fixed settings of one search surface (times in ms)."""

    seqs: tuple[int, ...] = (16, 32, 64, 128, 256)
    tokens: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)
    per_seq: tuple[float, ...] = (0.3, 0.2)
    base_ms: float = 10.0
    prefill_ms: float = 0.01
    input_len: int = 512
    output_len: int = 128  # one token per chunk: C = 128 chunks
    oom_above: int = 128
    concurrency: int = 512
    slo_itl_ms: float = 50.0
    full_requests: int = 4320  # 27 · 160: successive halving's rungs 0-3: 160 ... 4320
    startup_s: float = 60.0

    @property
    def space(self) -> dict[str, list[Any]]:
        return {SEQS: list(self.seqs), TOKENS: list(self.tokens), PER_SEQ: list(self.per_seq)}

    def points(self) -> list[dict[str, Any]]:
        return [
            {SEQS: n, TOKENS: t, PER_SEQ: s}
            for n in self.seqs
            for t in self.tokens
            for s in self.per_seq
        ]


SURFACE = Surface()
NOISE = 0.01
BUDGETS = {"grid": 50, "random": 20, "successive-halving": 80, "tpe": 20}
RUNG0_SHARE = {"successive-halving": 27}  # rung 0 runs 1/27 of the full length
AGENTS = (1, 2, 4)


@dataclass(frozen=True)
class Point:
    duration_s: float
    output_throughput: float  # tokens/s
    request_throughput: float
    p99_itl_ms: float

    def meets(self, surf: Surface) -> bool:
        return self.p99_itl_ms <= surf.slo_itl_ms


def flags_of(params: dict[str, Any]) -> tuple[int, int, float]:
    return int(params[SEQS]), int(params[TOKENS]), float(params[PER_SEQ])


# the analytic model ----------------------------------------------------------------------------
def steady_state(n: int, t: int, s: float, surf: Surface = SURFACE) -> tuple[float, float]:
    """(output tokens/s, ITL p99 ms) of the saturated steady state (the formulas above)."""
    chunks = surf.output_len
    k = min(t // surf.input_len, n)
    m = n // k
    period_ms = chunks * (surf.base_ms + s * n) + surf.prefill_ms * n * surf.input_len
    share = m * (n - k) / (n * (chunks - 1))
    itl = surf.base_ms + s * n + (surf.prefill_ms * t if share > 0.01 else 0.0)
    return n * surf.output_len / period_ms * 1000.0, itl


def weighted_percentile(counts: dict[float, int], p: float) -> float:
    """``percentile`` of the sorted list holding each value ``count`` times, without building it."""
    ordered = sorted(counts)
    total = sum(counts.values())

    def at(index: int) -> float:
        seen = 0
        for value in ordered:
            seen += counts[value]
            if seen > index:
                return value
        return ordered[-1]

    rank = p / 100.0 * (total - 1)
    low = math.floor(rank)
    high = min(low + 1, total - 1)
    return at(low) + (at(high) - at(low)) * (rank - low)


def finite_run(n: int, t: int, s: float, requests: int, surf: Surface = SURFACE) -> Point:
    """A closed-loop run of ``requests`` at the surface's concurrency (>= N + k, so the queue
    never starves before it empties), all sent at once at 0: the admission schedule summed step
    by step."""
    chunks = surf.output_len
    k = min(t // surf.input_len, n)  # prompts admitted per step: the budget's, or every slot
    if t % surf.input_len or n % k or n // k > chunks or n + k > surf.concurrency:
        raise ValueError(f"outside the analytic model: N={n} T={t}")
    m = n // k
    admissions = math.ceil(requests / k)
    last_step = 1 + (admissions - 1) % m + (admissions - 1) // m * chunks + chunks - 1
    running = [0] * (last_step + 2)  # difference array over steps 1..last_step
    prefill = [0] * (last_step + 1)
    for a in range(admissions):
        size = k if a < admissions - 1 else requests - k * (admissions - 1)
        step = 1 + a % m + a // m * chunks
        running[step] += size
        running[step + chunks] -= size
        prefill[step] += size
    duration_ms = 0.0
    gaps: dict[float, int] = {}
    batch = 0
    for step in range(1, last_step + 1):
        batch += running[step]
        d = surf.base_ms + s * batch + surf.prefill_ms * prefill[step] * surf.input_len
        duration_ms += d
        decoding = batch - prefill[step]
        if decoding:
            gaps[d] = gaps.get(d, 0) + decoding
    seconds = duration_ms / 1000.0
    return Point(
        seconds,
        requests * surf.output_len / seconds,
        requests / seconds,
        weighted_percentile(gaps, 99),
    )


# the simulator's own engine in virtual time ---------------------------------------------------
class VirtualClock:
    """``at(when, callback)`` on a virtual clock, fired in time order by ``run``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0

    def at(self, when: float, callback: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, callback))

    def run(self) -> None:
        while self.heap:
            when, _, callback = heapq.heappop(self.heap)
            self.now = max(self.now, when)
            callback()


@dataclass
class VirtualRequest:
    """A request as BatchEngine sees it (engine.BatchedRequest), recording its chunk times."""

    arrival: float
    on_done: Callable[[VirtualRequest], None]
    prompt_work: int  # prompt tokens
    total: int  # output tokens, one per chunk
    chunks: int = 0
    done: bool = False
    per_chunk: int = 1
    times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.chunks = self.total

    @property
    def kv_tokens(self) -> int:
        return self.prompt_work + self.total

    def admitted(self) -> None:
        pass

    def step_chunk(self, deadline: float) -> None:
        self.times.append(deadline)
        if len(self.times) == self.chunks:
            self.done = True
            self.on_done(self)


def virtual_run(
    n: int,
    t: int,
    s: float,
    requests: int,
    concurrency: int = 0,
    rate: float = 0.0,
    seed: int = 0,
    surf: Surface = SURFACE,
) -> Point:
    """The simulator's BatchEngine with a virtual client: a closed loop of ``concurrency`` or
    Poisson arrivals at ``rate`` (inf: all at 0), ``requests`` in all."""
    settings = SimSettings(
        max_num_seqs=n,
        max_num_batched_tokens=t,
        step_ms_base=surf.base_ms,
        step_ms_per_seq=s,
        prefill_ms_per_token=surf.prefill_ms,
    )
    clock = VirtualClock()
    engine = BatchEngine(settings, clock, SimMetrics("sim", LatenessStats()))
    finished: list[VirtualRequest] = []
    sent = 0

    def send(at: float) -> None:
        nonlocal sent
        sent += 1
        request = VirtualRequest(at, on_done, surf.input_len, surf.output_len)
        clock.at(at, lambda: engine.submit(request))

    def on_done(request: VirtualRequest) -> None:
        finished.append(request)
        if concurrency and sent < requests:
            send(request.times[-1])

    if concurrency:
        for _ in range(min(concurrency, requests)):
            send(0.0)
    else:
        rng = random.Random(seed)
        at = 0.0
        for _ in range(requests):
            send(at)
            if rate != math.inf:
                at += rng.expovariate(rate)
    clock.run()
    end = max(r.times[-1] for r in finished)
    gaps = sorted(
        (b - a) * 1000.0 for r in finished for a, b in zip(r.times, r.times[1:], strict=False)
    )
    return Point(
        end, len(finished) * surf.output_len / end, len(finished) / end, percentile(gaps, 99)
    )


# the search harness ----------------------------------------------------------------------------
def search_spec(strategy: str, agents: int, seed: int, surf: Surface = SURFACE) -> SearchSpec:
    raw = {
        "space": surf.space,
        "objective": {"maximize": "output_throughput"},
        "slo": {"itl_p99_ms": surf.slo_itl_ms},
        "load": {"concurrency": [surf.concurrency]},
        "budget": {"trials": BUDGETS[strategy]},
        "strategy": strategy,
        "eta": 3,
        "parallel": agents,
        "seed": seed,
    }
    spec, issues = parse_search(raw)
    if spec is None:
        raise SystemExit(f"bad search spec: {issues}")
    return spec


@dataclass
class Launch:
    duration_s: float
    failure: str = ""
    objective: float | None = None


def launch(
    params: dict[str, Any], requests: int, rng: random.Random, surf: Surface = SURFACE
) -> Launch:
    n, t, s = flags_of(params)
    if n > surf.oom_above:
        return Launch(surf.startup_s, failure="CUDA_OOM")
    point = finite_run(n, t, s, requests, surf)
    objective = point.output_throughput * (1 + rng.gauss(0.0, NOISE)) if point.meets(surf) else None
    return Launch(surf.startup_s + point.duration_s, objective=objective)


@dataclass
class SearchResult:
    name: str
    agents: int
    seed: int
    launched: int
    gpu_seconds: float
    wall_seconds: float
    best: dict[str, Any] | None


def run_search(strategy: str, agents: int, seed: int, surf: Surface = SURFACE) -> SearchResult:
    """The controller's driver loop over a discrete-event pool of ``agents``."""
    spec = search_spec(strategy, agents, seed, surf)
    rung0 = surf.full_requests // RUNG0_SHARE.get(strategy, 1)
    rng = random.Random(seed * 7919 + agents)
    trials: list[TrialRow] = []
    running: list[tuple[float, int, TrialRow, Launch]] = []  # (finish, number, trial, launch)
    now = gpu = 0.0
    exhausted = False
    while True:
        launched = sum(1 for t in trials if t.experiment_id)
        slots = min(agents - len(running), spec.max_trials - launched)
        for _ in range(MAX_ASK_ROUNDS):
            if slots <= 0:
                break
            answer = strategy_for(spec.strategy).ask(spec, views(trials), slots)
            exhausted = answer.exhausted
            for proposal in answer.proposals:
                trial = TrialRow(
                    "g", len(trials) + 1, proposal.params, TrialState.RUNNING, now, proposal.rung
                )
                cause = implied_oom(spec, proposal.params, trials)
                trials.append(trial)
                if cause is not None:
                    trial.state, trial.failure_reason = TrialState.SKIPPED, "IMPLIED_OOM"
                    continue
                trial.experiment_id = f"x{trial.number}"
                result = launch(proposal.params, rung0 * spec.eta**proposal.rung, rng, surf)
                heapq.heappush(running, (now + result.duration_s, trial.number, trial, result))
                slots -= 1
            if exhausted or not answer.proposals:
                break
        if not running:  # exhausted, the budget spent, or nothing left to propose
            break
        finish, _, trial, result = heapq.heappop(running)
        now = finish
        gpu += result.duration_s
        if result.failure:
            trial.state, trial.failure_reason = TrialState.FAILED, result.failure
            continue
        trial.state = TrialState.DONE
        trial.load = ("concurrency", float(surf.concurrency))
        if result.objective is not None:  # one launch, one value (the launch is the unit)
            trial.samples = [result.objective]
            trial.objective = result.objective
    best = best_trial(spec, trials)
    return SearchResult(
        strategy,
        agents,
        seed,
        sum(1 for t in trials if t.experiment_id),
        gpu,
        now,
        best.params if best is not None else None,
    )


# the race under launch noise -------------------------------------------------------------------
NOISE_SURFACES = {
    "top two 0.3 % apart": SURFACE,
    "runner-up 10 % below": Surface(tokens=(1024, 4096), per_seq=(0.3, 0.25)),
    "runner-up 19 % below": Surface(tokens=(512, 2048, 8192)),
}
NOISE_CVS = (0.03, 0.05, 0.10)
NOISE_STRATEGIES = ("grid", "successive-halving")


@functools.cache
def cached_run(n: int, t: int, s: float, requests: int, surf: Surface) -> Point:
    return finite_run(n, t, s, requests, surf)


def noisy_launch(
    params: dict[str, Any], requests: int, rng: random.Random, cv: float, surf: Surface
) -> Launch:
    """One launch: a server start, then the run; its throughput scaled by one log-normal factor
    (mean 1, coefficient of variation ``cv``), as a real engine varies between restarts."""
    n, t, s = flags_of(params)
    if n > surf.oom_above:
        return Launch(surf.startup_s, failure="CUDA_OOM")
    point = cached_run(n, t, s, requests, surf)
    sigma = math.sqrt(math.log1p(cv * cv))
    factor = math.exp(rng.gauss(-sigma * sigma / 2.0, sigma))
    objective = point.output_throughput * factor if point.meets(surf) else None
    return Launch(surf.startup_s + point.duration_s / factor, objective=objective)


@dataclass
class RaceResult:
    verdict: str
    best: dict[str, Any] | None
    others: list[dict[str, Any]]  # the runner-up, or the trials the best ties with
    tried: list[dict[str, Any]]  # every configuration that met the SLO in the strategy
    gpu_seconds: float
    strategy_launches: int
    race_launches: int


def run_raced(strategy: str, seed: int, cv: float, surf: Surface, confirm: int = 6) -> RaceResult:
    """The controller's driver loop on one agent, the strategy then the race (race.py), every
    launch noisy: ask, skip what an OOM implies, queue the race's rounds, read its answer."""
    spec = dataclasses.replace(search_spec(strategy, 1, seed, surf), confirm_launches=confirm)
    rung0 = surf.full_requests // RUNG0_SHARE.get(strategy, 1)
    rng = random.Random(seed * 7919 + int(cv * 1000))
    trials: list[TrialRow] = []
    gpu = 0.0
    while True:
        proposals = []
        if counted(trials) < spec.max_trials:
            answer = strategy_for(spec.strategy).ask(spec, views(trials), 1)
            proposals = answer.proposals
        if not proposals:
            standing = race.standings(spec, trials)
            if standing.settled:
                break
            proposals = standing.pending[:1]
        proposal = proposals[0]
        trial = TrialRow(
            "g", len(trials) + 1, proposal.params, TrialState.RUNNING, 0.0, proposal.rung
        )
        trials.append(trial)
        if proposal.race:
            trial.phase = "effect" if proposal.effect else "race"
            trial.race_round = proposal.race
        elif implied_oom(spec, proposal.params, trials) is not None:
            trial.state, trial.failure_reason = TrialState.SKIPPED, "IMPLIED_OOM"
            continue
        trial.experiment_id = f"x{trial.number}"
        result = noisy_launch(proposal.params, rung0 * spec.eta**proposal.rung, rng, cv, surf)
        gpu += result.duration_s
        trial.gpu_seconds = result.duration_s
        if result.failure:
            trial.state, trial.failure_reason = TrialState.FAILED, result.failure
            continue
        trial.state = TrialState.DONE
        trial.load = ("concurrency", float(surf.concurrency))
        if result.objective is not None:
            trial.samples, trial.objective = [result.objective], result.objective
    st = race.standings(spec, trials)
    others = [e.params for e in st.tied_with]
    if not others and st.runner_up is not None:
        others = [st.runner_up.params]
    tried = [t.params for t in trials if not race.is_race(t) and t.objective is not None]
    return RaceResult(
        st.verdict,
        None if st.best is None else st.best.params,
        others,
        tried,
        gpu,
        counted(trials),
        sum(1 for t in trials if race.is_race(t) and t.experiment_id),
    )


def grid_three(surf: Surface) -> float:
    """GPU-seconds of a grid with 3 launches per point at the full length (an OOM once)."""
    total = 0.0
    for params in surf.points():
        n, t, s = flags_of(params)
        if n > surf.oom_above:
            total += surf.startup_s
        else:
            total += 3 * (surf.startup_s + cached_run(n, t, s, surf.full_requests, surf).duration_s)
    return total


def noise_table(seeds: int, confirm: int = 6) -> list[str]:
    """Per surface, noise and strategy: how often the answer is the right winner, a tie that
    holds the optimum, undecided, or a wrong winner called better (among searches whose
    strategy tried a configuration that serves; the others are counted apart)."""
    lines = [
        (
            f"the race under launch noise ({seeds} seeds each; margin 2 %, confirm {confirm} "
            "launches; a configuration 'serves' within 2 % of the optimum's true value):"
        ),
        (
            "| surface | launch CV | strategy | right winner | tie holding it | undecided "
            "(holding it) | wrong winner 'better' | optimum not tried | launches (strategy + "
            "race) | GPU-s vs grid x3 |"
        ),
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, surf in NOISE_SURFACES.items():
        values, optimum, _ = truth(surf)
        baseline = grid_three(surf)

        def serves(
            params: dict[str, Any] | None,
            values: dict[str, float | None] = values,
            optimum: float = optimum,
        ) -> bool:
            return params is not None and (values[key(params)] or 0.0) >= 0.98 * optimum

        for cv in NOISE_CVS:
            for strategy in NOISE_STRATEGIES:
                runs = [run_raced(strategy, seed, cv, surf, confirm) for seed in range(seeds)]
                missed = [r for r in runs if not any(map(serves, r.tried))]
                fair = [r for r in runs if any(map(serves, r.tried))]
                right = sum(r.verdict in ("better", "alone") and serves(r.best) for r in fair)
                wrong = sum(r.verdict == "better" and not serves(r.best) for r in fair)
                tie = sum(
                    r.verdict == "tie" and (serves(r.best) or any(map(serves, r.others)))
                    for r in fair
                )
                undecided = [r for r in fair if r.verdict == "undecided"]
                holding = sum(serves(r.best) or any(map(serves, r.others)) for r in undecided)
                n = max(1, len(fair))
                lines.append(
                    f"| {name} | {cv:.0%} | {strategy} | {right / n:.1%} | {tie / n:.1%} "
                    f"| {len(undecided) / n:.1%} ({holding / n:.1%}) | {wrong / n:.1%} "
                    f"| {len(missed)} "
                    f"| {statistics.fmean(r.strategy_launches for r in runs):.1f} + "
                    f"{statistics.fmean(r.race_launches for r in runs):.1f} "
                    f"| {statistics.fmean(r.gpu_seconds for r in runs) / baseline:.0%} |"
                )
    return lines


def auto_tune(seed: int, surf: Surface = SURFACE) -> SearchResult:
    """vLLM auto_tune.sh's method on one host, once per --step-ms-per-seq value (it varies only
    the two lists), after a first run whose memory probe (the largest pair) OOMs at each of
    gpu-memory-utilization 0.98 ... 0.90 and stops, so the user drops 256."""
    rng = random.Random(seed)
    gpu = wall = 0.0
    starts = 9  # the failed first invocation: 9 probe starts, each OOM at the end of start-up
    gpu += 9 * surf.startup_s
    wall += 9 * surf.startup_s
    best: tuple[float, dict[str, Any]] | None = None
    seqs_list = [v for v in surf.seqs if v <= surf.oom_above]
    for s in surf.per_seq:
        starts += 1  # this invocation's probe: the largest pair starts, then is killed
        gpu += surf.startup_s
        wall += surf.startup_s
        for n in seqs_list:
            for t in surf.tokens:
                starts += 1
                up = surf.startup_s  # health is polled every 10 s: 60 s start-up is seen at 60 s
                point = finite_run(n, t, s, 1000, surf)
                up += point.duration_s
                throughput = point.request_throughput * (1 + rng.gauss(0.0, NOISE))
                met = point.meets(surf)
                rate = int(throughput) + 1
                while not met and rate > 0:
                    up += 5.0  # reset_prefix_cache; sleep 5
                    point = virtual_run(
                        n, t, s, 100, rate=float(rate), seed=rng.randrange(1 << 30), surf=surf
                    )
                    up += point.duration_s
                    throughput = point.request_throughput * (1 + rng.gauss(0.0, NOISE))
                    met = point.meets(surf)
                    rate -= 1
                gpu += up
                wall += up + 10.0  # pkill; sleep 10
                params = {SEQS: n, TOKENS: t, PER_SEQ: s}
                if met and (best is None or throughput > best[0]):
                    best = (throughput, params)
    return SearchResult("vLLM auto_tune", 1, seed, starts, gpu, wall, best[1] if best else None)


# the table -------------------------------------------------------------------------------------
def truth(surf: Surface = SURFACE) -> tuple[dict[str, float | None], float, dict[str, Any]]:
    """Every point's objective at the full length (None: OOM or SLO broken) and the optimum."""
    values: dict[str, float | None] = {}
    best: tuple[float, dict[str, Any]] | None = None
    for n in surf.seqs:
        for t in surf.tokens:
            for s in surf.per_seq:
                params = {SEQS: n, TOKENS: t, PER_SEQ: s}
                value = None
                if n <= surf.oom_above:
                    point = finite_run(n, t, s, surf.full_requests, surf)
                    value = point.output_throughput if point.meets(surf) else None
                values[key(params)] = value
                if value is not None and (best is None or value > best[0]):
                    best = (value, params)
    if best is None:
        raise ValueError("no point of the surface meets the SLO")
    return values, best[0], best[1]


def check_model(surf: Surface = SURFACE) -> list[str]:
    """The analytic schedule against the simulator's engine, every non-OOM point."""
    lines = [
        f"analytic vs the simulator's engine (virtual time), 480 requests, c={surf.concurrency}:"
    ]
    worst_tput = worst_itl = 0.0
    for n in surf.seqs:
        if n > surf.oom_above:
            continue
        for t in surf.tokens:
            for s in surf.per_seq:
                a = finite_run(n, t, s, 480, surf)
                v = virtual_run(n, t, s, 480, concurrency=surf.concurrency, surf=surf)
                worst_tput = max(worst_tput, abs(a.output_throughput / v.output_throughput - 1))
                worst_itl = max(worst_itl, abs(a.p99_itl_ms - v.p99_itl_ms))
    lines.append(
        f"  worst throughput error {worst_tput:.2e} (relative), ITL p99 {worst_itl:.2e} ms"
    )
    steady = []
    for n, t, s in ((128, 512, 0.2), (64, 2048, 0.3), (16, 8192, 0.3)):
        x, itl = steady_state(n, t, s, surf)
        full = finite_run(n, t, s, surf.full_requests, surf)
        steady.append(
            f"N={n} T={t} S={s}: steady {x:.0f} tok/s, ITL p99 {itl:.2f} ms; "
            f"{surf.full_requests} requests {full.output_throughput:.0f} tok/s, "
            f"{full.p99_itl_ms:.2f} ms"
        )
    return lines + ["  " + line for line in steady]


REAL_CHECK = Surface(output_len=32, concurrency=32)
REAL_POINTS = ((16, 1024, 0.2), (8, 512, 0.3), (16, 8192, 0.3))


def real_check(surf: Surface = REAL_CHECK, requests: int = 320) -> list[str]:
    """A few points on real processes: the simulator (tunelab sim-server's code) and the load
    generator (tunelab bench, closed loop) on loopback, against the analytic figures."""
    title = (
        f"real processes: sim-server + tunelab bench, c={surf.concurrency}, {requests} requests, "
        f"prompts {surf.input_len}, output {surf.output_len}:"
    )
    lines = [
        title,
        "| N | T | S | tok/s analytic | measured | ITL p99 ms analytic | measured | client |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n, t, s in REAL_POINTS:
            flags = ["--max-num-seqs", str(n), "--max-num-batched-tokens", str(t)]
            flags += ["--step-ms-base", str(surf.base_ms), "--step-ms-per-seq", str(s)]
            flags += ["--prefill-ms-per-token", str(surf.prefill_ms)]
            with SimulatorProcess(flags, Path(tmp) / f"sim-{n}-{t}.log") as sim:
                argv = python_module_argv("tunelab.cli", "bench", "--url", sim.url)
                argv += ["--concurrency", str(surf.concurrency), "--requests", str(requests)]
                argv += ["--input-len", str(surf.input_len), "--output-len", str(surf.output_len)]
                done = subprocess.run(
                    [*argv, "--json"], capture_output=True, text=True, timeout=300, check=False
                )
            if done.returncode != 0:
                lines.append(f"| {n} | {t} | {s} | bench failed: {done.stderr[-200:]!r} |")
                continue
            point = json.loads(done.stdout)["points"][0]
            model = finite_run(n, t, s, requests, surf)
            check = point.get("client_check", {})
            state = "starved" if check.get("client_starved") else "ok"
            state = "saturated" if check.get("client_saturated") else state
            lines.append(
                f"| {n} | {t} | {s} | {model.output_throughput:.1f} "
                f"| {point['output_throughput']:.1f} | {model.p99_itl_ms:.2f} "
                f"| {point['p99_itl_ms']:.2f} | {state} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per strategy (default 5)")
    parser.add_argument("--check", action="store_true", help="also check the model (slow)")
    parser.add_argument(
        "--real-check", action="store_true", help="also run a few points on real processes"
    )
    parser.add_argument("--json", type=Path, help="write every search's result here")
    parser.add_argument(
        "--noise",
        type=int,
        metavar="SEEDS",
        help="only the race under launch noise (CV 3, 5, 10 %%), SEEDS seeds per cell",
    )
    parser.add_argument(
        "--confirm", type=int, default=6, help="with --noise: launches per contender (default 6)"
    )
    parser.add_argument(
        "--cost",
        type=int,
        metavar="SEEDS",
        help="only the race's cost to a decision (benchmarks/race_cost.py), SEEDS seeds per cell",
    )
    args = parser.parse_args(argv)
    if args.cost:
        from benchmarks.race_cost import cost_table  # beside this script

        started = time.monotonic()
        print("\n".join(cost_table(args.cost)))
        print(f"(computed in {time.monotonic() - started:.1f} s)")
        return 0
    if args.noise:
        started = time.monotonic()
        print("\n".join(noise_table(args.noise, args.confirm)))
        print(f"(computed in {time.monotonic() - started:.1f} s)")
        return 0
    surf = SURFACE
    started = time.monotonic()
    values, optimum, optimum_params = truth(surf)
    print(
        f"optimum: N={optimum_params[SEQS]} T={optimum_params[TOKENS]} "
        f"S={optimum_params[PER_SEQ]}: {optimum:.1f} tok/s at ITL p99 <= {surf.slo_itl_ms} ms "
        f"({sum(v is not None for v in values.values())} of {len(values)} points feasible)"
    )
    rows: list[dict[str, Any]] = []
    results: list[SearchResult] = []
    for name in BUDGETS:
        for seed in range(args.seeds):
            results.extend(run_search(name, agents, seed, surf) for agents in AGENTS)
    results.extend(auto_tune(seed, surf) for seed in range(args.seeds))
    for name in [*BUDGETS, "vLLM auto_tune"]:
        mine = [r for r in results if r.name == name]
        one = [r for r in mine if r.agents == 1]
        found = sum(
            1 for r in one if r.best is not None and (values[key(r.best)] or 0.0) >= 0.98 * optimum
        )
        if name == "vLLM auto_tune":  # one host: more agents do not help it
            wall = dict.fromkeys(AGENTS, statistics.fmean(r.wall_seconds for r in one))
        else:
            wall = {
                a: statistics.fmean(r.wall_seconds for r in mine if r.agents == a) for a in AGENTS
            }
        rows.append(
            {
                "strategy": name,
                "found": f"{found}/{len(one)}",
                "trials": statistics.fmean(r.launched for r in one),
                "gpu_s": statistics.fmean(r.gpu_seconds for r in one),
                **{f"wall_{a}": wall[a] for a in AGENTS},
            }
        )
    grid_gpu = rows[0]["gpu_s"]
    print(
        "| strategy | found optimum (within 2 %) | trials | simulated GPU-s | vs grid "
        "| wall, 1 agent | 2 agents | 4 agents | 4 vs 1 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['strategy']} | {row['found']} | {row['trials']:.1f} | {row['gpu_s']:,.0f} "
            f"| {row['gpu_s'] / grid_gpu:.0%} | {row['wall_1']:,.0f} s | {row['wall_2']:,.0f} s "
            f"| {row['wall_4']:,.0f} s | {row['wall_4'] / row['wall_1']:.0%} |"
        )
    if args.check:
        print("\n".join(check_model(surf)))
    if args.real_check:
        print("\n".join(real_check()))
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "searches": [r.__dict__ for r in results]}, indent=1)
        )
    print(f"(computed in {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
