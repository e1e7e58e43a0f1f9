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

Usage: python benchmarks/search_efficiency.py [--seeds 5] [--check] [--json FILE]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tunelab.bench.simulator.batching import BatchEngine
from tunelab.bench.simulator.metrics import SimMetrics
from tunelab.bench.simulator.options import SimSettings
from tunelab.bench.simulator.timing import LatenessStats
from tunelab.bench.stats import percentile
from tunelab.controller.search.driver import MAX_ASK_ROUNDS, best_trial, implied_oom, views
from tunelab.controller.search.space import SearchSpec, parse_search
from tunelab.controller.search.strategies import key, strategy_for
from tunelab.controller.store.search_models import TrialRow

SEQS = "server.flags.--max-num-seqs"
TOKENS = "server.flags.--max-num-batched-tokens"
PER_SEQ = "server.flags.--step-ms-per-seq"
SPACE: dict[str, list[Any]] = {
    SEQS: [16, 32, 64, 128, 256],
    TOKENS: [512, 1024, 2048, 4096, 8192],
    PER_SEQ: [0.3, 0.2],
}
BASE_MS = 10.0
PREFILL_MS = 0.01
INPUT_LEN = 512
OUTPUT_LEN = 128  # one token per chunk: C = 128 chunks
OOM_ABOVE = 128
CONCURRENCY = 512
SLO_ITL_MS = 50.0
FULL_REQUESTS = 4320  # 27 · 160: successive halving's rungs 0-3 run 160, 480, 1440, 4320
STARTUP_S = 60.0
NOISE = 0.01
BUDGETS = {"grid": 50, "random": 20, "successive-halving": 80, "tpe": 20}
RUNG0_REQUESTS = {"successive-halving": FULL_REQUESTS // 27}
AGENTS = (1, 2, 4)


@dataclass(frozen=True)
class Point:
    duration_s: float
    output_throughput: float  # tokens/s
    request_throughput: float
    p99_itl_ms: float

    def meets(self) -> bool:
        return self.p99_itl_ms <= SLO_ITL_MS


def flags_of(params: dict[str, Any]) -> tuple[int, int, float]:
    return int(params[SEQS]), int(params[TOKENS]), float(params[PER_SEQ])


# the analytic model ----------------------------------------------------------------------------
def steady_state(n: int, t: int, s: float) -> tuple[float, float]:
    """(output tokens/s, ITL p99 ms) of the saturated steady state (the formulas above)."""
    chunks = OUTPUT_LEN
    k = t // INPUT_LEN
    m = n // k
    period_ms = chunks * (BASE_MS + s * n) + PREFILL_MS * n * INPUT_LEN
    share = m * (n - k) / (n * (chunks - 1))
    itl = BASE_MS + s * n + (PREFILL_MS * t if share > 0.01 else 0.0)
    return n * OUTPUT_LEN / period_ms * 1000.0, itl


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


def finite_run(n: int, t: int, s: float, requests: int) -> Point:
    """A closed-loop run of ``requests`` at CONCURRENCY (>= N + k, so the queue never starves
    before it empties), all sent at once at 0: the admission schedule summed step by step."""
    chunks = OUTPUT_LEN
    k = t // INPUT_LEN
    if t % INPUT_LEN or n % k or n // k > chunks or n + k > CONCURRENCY:
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
        d = BASE_MS + s * batch + PREFILL_MS * prefill[step] * INPUT_LEN
        duration_ms += d
        decoding = batch - prefill[step]
        if decoding:
            gaps[d] = gaps.get(d, 0) + decoding
    seconds = duration_ms / 1000.0
    return Point(
        seconds,
        requests * OUTPUT_LEN / seconds,
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
    done: bool = False
    chunks: int = OUTPUT_LEN
    total: int = OUTPUT_LEN
    per_chunk: int = 1
    times: list[float] = field(default_factory=list)

    @property
    def prompt_work(self) -> int:
        return INPUT_LEN

    @property
    def kv_tokens(self) -> int:
        return INPUT_LEN + OUTPUT_LEN

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
) -> Point:
    """The simulator's BatchEngine with a virtual client: a closed loop of ``concurrency`` or
    Poisson arrivals at ``rate`` (inf: all at 0), ``requests`` in all."""
    settings = SimSettings(
        max_num_seqs=n,
        max_num_batched_tokens=t,
        step_ms_base=BASE_MS,
        step_ms_per_seq=s,
        prefill_ms_per_token=PREFILL_MS,
    )
    clock = VirtualClock()
    engine = BatchEngine(settings, clock, SimMetrics("sim", LatenessStats()))
    finished: list[VirtualRequest] = []
    sent = 0

    def send(at: float) -> None:
        nonlocal sent
        sent += 1
        request = VirtualRequest(at, on_done)
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
    return Point(end, len(finished) * OUTPUT_LEN / end, len(finished) / end, percentile(gaps, 99))


# the search harness ----------------------------------------------------------------------------
def search_spec(strategy: str, agents: int, seed: int) -> SearchSpec:
    raw = {
        "space": SPACE,
        "objective": {"maximize": "output_throughput"},
        "slo": {"itl_p99_ms": SLO_ITL_MS},
        "load": {"concurrency": [CONCURRENCY]},
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


def launch(params: dict[str, Any], requests: int, rng: random.Random) -> Launch:
    n, t, s = flags_of(params)
    if n > OOM_ABOVE:
        return Launch(STARTUP_S, failure="CUDA_OOM")
    point = finite_run(n, t, s, requests)
    objective = point.output_throughput * (1 + rng.gauss(0.0, NOISE)) if point.meets() else None
    return Launch(STARTUP_S + point.duration_s, objective=objective)


@dataclass
class SearchResult:
    name: str
    agents: int
    seed: int
    launched: int
    gpu_seconds: float
    wall_seconds: float
    best: dict[str, Any] | None


def run_search(strategy: str, agents: int, seed: int) -> SearchResult:
    """The controller's driver loop over a discrete-event pool of ``agents``."""
    spec = search_spec(strategy, agents, seed)
    rung0 = RUNG0_REQUESTS.get(strategy, FULL_REQUESTS)
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
                    "g", len(trials) + 1, proposal.params, "RUNNING", now, proposal.rung
                )
                cause = implied_oom(spec, proposal.params, trials)
                trials.append(trial)
                if cause is not None:
                    trial.state, trial.failure_reason = "SKIPPED", "IMPLIED_OOM"
                    continue
                trial.experiment_id = f"x{trial.number}"
                result = launch(proposal.params, rung0 * spec.eta**proposal.rung, rng)
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
            trial.state, trial.failure_reason = "FAILED", result.failure
            continue
        trial.state = "DONE"
        if result.objective is not None:
            trial.samples = [result.objective]
            pooled = [
                v for o in trials if o.number <= trial.number and key(o.params) == key(trial.params)
                for v in o.samples
            ]  # fmt: skip
            trial.objective = sum(pooled) / len(pooled)
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


def auto_tune(seed: int) -> SearchResult:
    """vLLM auto_tune.sh's method on one host, once per --step-ms-per-seq value (it varies only
    the two lists), after a first run whose memory probe (the largest pair) OOMs at each of
    gpu-memory-utilization 0.98 ... 0.90 and stops, so the user drops 256."""
    rng = random.Random(seed)
    gpu = wall = 0.0
    starts = 9  # the failed first invocation: 9 probe starts, each OOM at the end of start-up
    gpu += 9 * STARTUP_S
    wall += 9 * STARTUP_S
    best: tuple[float, dict[str, Any]] | None = None
    seqs_list = [v for v in SPACE[SEQS] if v <= OOM_ABOVE]
    for s in SPACE[PER_SEQ]:
        starts += 1  # this invocation's probe: the largest pair starts, then is killed
        gpu += STARTUP_S
        wall += STARTUP_S
        for n in seqs_list:
            for t in SPACE[TOKENS]:
                starts += 1
                up = STARTUP_S  # health is polled every 10 s: 60 s start-up is seen at 60 s
                point = finite_run(n, t, s, 1000)
                up += point.duration_s
                throughput = point.request_throughput * (1 + rng.gauss(0.0, NOISE))
                met = point.meets()
                rate = int(throughput) + 1
                while not met and rate > 0:
                    up += 5.0  # reset_prefix_cache; sleep 5
                    point = virtual_run(n, t, s, 100, rate=float(rate), seed=rng.randrange(1 << 30))
                    up += point.duration_s
                    throughput = point.request_throughput * (1 + rng.gauss(0.0, NOISE))
                    met = point.meets()
                    rate -= 1
                gpu += up
                wall += up + 10.0  # pkill; sleep 10
                params = {SEQS: n, TOKENS: t, PER_SEQ: s}
                if met and (best is None or throughput > best[0]):
                    best = (throughput, params)
    return SearchResult("vLLM auto_tune", 1, seed, starts, gpu, wall, best[1] if best else None)


# the table -------------------------------------------------------------------------------------
def truth() -> tuple[dict[str, float | None], float, dict[str, Any]]:
    """Every point's objective at the full length (None: OOM or SLO broken) and the optimum."""
    values: dict[str, float | None] = {}
    best: tuple[float, dict[str, Any]] | None = None
    for n in SPACE[SEQS]:
        for t in SPACE[TOKENS]:
            for s in SPACE[PER_SEQ]:
                params = {SEQS: n, TOKENS: t, PER_SEQ: s}
                value = None
                if n <= OOM_ABOVE:
                    point = finite_run(n, t, s, FULL_REQUESTS)
                    value = point.output_throughput if point.meets() else None
                values[key(params)] = value
                if value is not None and (best is None or value > best[0]):
                    best = (value, params)
    assert best is not None
    return values, best[0], best[1]


def check_model() -> list[str]:
    """The analytic schedule against the simulator's engine, every non-OOM point."""
    lines = ["analytic vs the simulator's engine (virtual time), 480 requests at concurrency 512:"]
    worst_tput = worst_itl = 0.0
    for n in SPACE[SEQS]:
        if n > OOM_ABOVE:
            continue
        for t in SPACE[TOKENS]:
            for s in SPACE[PER_SEQ]:
                a = finite_run(n, t, s, 480)
                v = virtual_run(n, t, s, 480, concurrency=CONCURRENCY)
                worst_tput = max(worst_tput, abs(a.output_throughput / v.output_throughput - 1))
                worst_itl = max(worst_itl, abs(a.p99_itl_ms - v.p99_itl_ms))
    lines.append(
        f"  worst throughput error {worst_tput:.2e} (relative), ITL p99 {worst_itl:.2e} ms"
    )
    steady = []
    for n, t, s in ((128, 512, 0.2), (64, 2048, 0.3), (16, 8192, 0.3)):
        x, itl = steady_state(n, t, s)
        full = finite_run(n, t, s, FULL_REQUESTS)
        steady.append(
            f"N={n} T={t} S={s}: steady {x:.0f} tok/s, ITL p99 {itl:.2f} ms; "
            f"{FULL_REQUESTS} requests {full.output_throughput:.0f} tok/s, {full.p99_itl_ms:.2f} ms"
        )
    return lines + ["  " + line for line in steady]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per strategy (default 5)")
    parser.add_argument("--check", action="store_true", help="also check the model (slow)")
    parser.add_argument("--json", type=Path, help="write every search's result here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    values, optimum, optimum_params = truth()
    print(
        f"optimum: N={optimum_params[SEQS]} T={optimum_params[TOKENS]} "
        f"S={optimum_params[PER_SEQ]}: {optimum:.1f} tok/s at ITL p99 <= {SLO_ITL_MS} ms "
        f"({sum(v is not None for v in values.values())} of {len(values)} points feasible)"
    )
    rows: list[dict[str, Any]] = []
    results: list[SearchResult] = []
    for name in BUDGETS:
        for seed in range(args.seeds):
            results.extend(run_search(name, agents, seed) for agents in AGENTS)
    results.extend(auto_tune(seed) for seed in range(args.seeds))
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
        print("\n".join(check_model()))
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "searches": [r.__dict__ for r in results]}, indent=1)
        )
    print(f"(computed in {time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
