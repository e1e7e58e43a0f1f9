"""A/A error rates of the one judge (issue 43, figures for the closing note), by simulation with
the product's own code:

1. per race: two equal configurations raced by ``tunelab.analysis.race`` (the state machine the
   controller runs) at every ``confirm`` from 2 to 12, with a share of the launches failed and a
   share client-limited (no evidence): how often the race calls one "better" (promised <= 5 %);
2. per report: A/A ablations of the demo's size (a baseline and 2 no-op changes, 2 load points,
   every compared metric) judged by ``effects_document`` with n launches a variant (2 to 12),
   a share of them failed: how often a report calls any row "better" or "worse" (<= 5 %);
3. per search: 8 equal configurations searched (grid, one launch each), raced and answered by
   the controller's own ``race.standings`` and ``answer.effect``: how often the answer's effect
   against the default says "better" (promised <= 2.5 %), beside what the same judge says over
   the winner's race launches (the launches that chose it: selected high).

Run: ``nice .venv/bin/python benchmarks/judge_error_rates.py`` (about 2 minutes of CPU; seeds are
fixed, so the figures do not depend on the machine). ``--quick`` runs a tenth of each.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Any

from tunelab.analysis import race as machine
from tunelab.analysis.effects import BETTER, WORSE, effects_document
from tunelab.analysis.evidence import Launch
from tunelab.analysis.intervals import contrast
from tunelab.analysis.judge import Verdict, judge_pair
from tunelab.analysis.metrics import CATALOGUE, COMPARED
from tunelab.controller.search import race
from tunelab.controller.search.answer import effect
from tunelab.controller.search.space import Load, Param, SearchSpec
from tunelab.controller.search.strategies import key
from tunelab.controller.states import TrialState
from tunelab.controller.store.search_models import TrialRow

CV = 0.05
FAILED = 0.15  # share of launches that fail
LIMITED = 0.15  # share of launches whose load generator was saturated (no evidence)
LOAD = ("concurrency", 8.0)
THROUGHPUT = CATALOGUE["output_throughput"]


def one_race(rng: random.Random, confirm: int) -> machine.RaceState:
    s = machine.Settings(THROUGHPUT, 0.02, confirm, LOAD, slos=1)
    first = {k: 100.0 * rng.lognormvariate(0, CV) for k in ("a", "b")}
    launches = [Launch(i + 1, k, load=LOAD, value=v) for i, (k, v) in enumerate(first.items())]
    order = sorted(first, key=lambda k: -first[k])
    state = machine.start(s, [(k, 1 + list(first).index(k)) for k in order])
    while True:
        state, asks = machine.step(state, launches)
        if not asks:
            return state
        for ask in asks:
            n, draw = len(launches) + 1, rng.random()
            if draw < LIMITED:
                x = Launch(
                    n, ask.config, ask.phase, ask.round, load=LOAD, failed=True, client_limited=True
                )
            elif draw < LIMITED + FAILED:
                x = Launch(n, ask.config, ask.phase, ask.round, load=LOAD, failed=True)
            else:
                value = 100.0 * rng.lognormvariate(0, CV)
                x = Launch(n, ask.config, ask.phase, ask.round, load=LOAD, value=value)
            launches.append(x)


def races(n: int, seed: int) -> None:
    rng = random.Random(seed)
    print(
        f"\n1. A/A races ({n} each; launch CV {CV:.0%}, {FAILED:.0%} of launches failed, "
        f"{LIMITED:.0%} client-limited; margin 2 %)"
    )
    print("| confirm | 'better' | tie | undecided | one left | looks (mean, max) | alpha (max) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for confirm in range(2, 13):
        found = [one_race(rng, confirm) for _ in range(n)]
        better = sum(st.outcome is machine.Outcome.BETTER for st in found)
        tie = sum(st.outcome is machine.Outcome.TIE for st in found)
        undecided = sum(st.outcome is machine.Outcome.UNDECIDED for st in found)
        alone = sum(st.outcome is machine.Outcome.ALONE for st in found)
        looks = [st.looks for st in found]
        print(
            f"| {confirm} | {better / n:.1%} | {tie / n:.1%} | {undecided / n:.1%} | "
            f"{alone / n:.1%} | "
            f"{sum(looks) / n:.2f}, {max(looks)} | {max(st.alpha_spent for st in found):.3f} |"
        )


def report_rows(rng: random.Random, launches: int) -> list[dict[str, Any]]:
    rows = []
    for name, varied in (
        ("baseline", {}),
        ("--a=1", {"server.flags.--a": "1"}),
        ("--b=1", {"server.flags.--b": "1"}),
    ):
        for i in range(launches):
            failed = rng.random() < FAILED
            shared = rng.gauss(0, CV * 0.7)  # a slow launch is slow everywhere

            def value(shared: float = shared) -> float:
                return 100.0 * math.exp(shared + rng.gauss(0, CV * 0.7))

            points = [
                {"key": key, **{m.field: value() for m in COMPARED if m.scope == "point"}}
                for key in ("c1", "c4")
            ]
            rows.append(
                {
                    "name": f"aa/{name}#{i + 1}",
                    "state": "FAILED" if failed else "SUCCEEDED",
                    "varied": varied,
                    "points": points,
                    "tokens_per_joule": value(),
                }
            )
    return rows


def reports(n: int, seed: int) -> None:
    rng = random.Random(seed)
    print(
        f"\n2. A/A reports ({n} each; a baseline and 2 no-op changes, 2 load points, every "
        f"compared metric: 30 rows; CV {CV:.0%}, {FAILED:.0%} of launches failed)"
    )
    print("| launches a variant | reports with a 'better' or 'worse' | rows called |")
    print("|---:|---:|---:|")
    for launches in range(2, 13):
        flagged = called = 0
        for _ in range(n):
            doc = effects_document(report_rows(rng, launches))
            hits = sum(e["verdict"] in (BETTER, WORSE) for e in doc["effects"])
            flagged += hits > 0
            called += hits
        print(f"| {launches} | {flagged / n:.1%} | {called} |")


A = "server.flags.--x"


def spec_of(configs: int) -> SearchSpec:
    return SearchSpec(
        space=(Param(A, "choice", tuple(range(configs))),),
        objective="output_throughput",
        maximize=True,
        slo={"tpot_p99_ms": 50.0},
        load=Load("concurrency", False, 0.0, (8.0,)),
        strategy="grid",
        max_trials=configs,
        confirm_launches=6,
        margin=0.02,
    )


def launch(rng: random.Random, number: int, value: int, proposal: Any = None) -> TrialRow:
    row = TrialRow("g", number, {A: value}, TrialState.DONE, 1.0, experiment_id=f"x-{number}")
    row.load, row.gpu_seconds = ("concurrency", 8.0), 10.0
    if proposal is not None:
        row.phase, row.race_round = ("effect" if proposal.effect else "race"), proposal.race
    draw = rng.random() if proposal is not None else 1.0
    if draw < LIMITED:
        row.state, row.failure_reason = TrialState.FAILED, "CLIENT_SATURATED"
    elif draw < LIMITED + FAILED:
        row.state, row.failure_reason = TrialState.FAILED, "BENCHMARK_FAILED"
    else:
        row.objective = 100.0 * rng.lognormvariate(0, CV)
        row.samples = [row.objective]
    return row


def one_search(rng: random.Random, configs: int) -> tuple[str, str]:
    """The answer's effect verdict, and the same judge over the winner's race launches."""
    spec = spec_of(configs)
    trials = [launch(rng, i + 1, i) for i in range(configs)]
    for _ in range(500):
        st = race.standings(spec, trials)
        if st.settled:
            break
        for p in st.pending:
            trials.append(launch(rng, len(trials) + 1, p.params[A], p))
    found = effect(spec, st, trials)
    best, state = st.best, st.state
    reused = "none"
    if best is not None and state is not None and best.key != key(spec.default_params):
        theirs = state.effect.get(key(spec.default_params), ())
        j = judge_pair(
            contrast(best.values, theirs),
            THROUGHPUT,
            margin=spec.margin,
            confidence=0.95,
            launches=(len(best.values), len(theirs)),
        )
        reused = j.verdict.value
    return str(found.get("verdict")), reused


def searches(n: int, seed: int, configs: int = 8) -> None:
    rng = random.Random(seed)
    print(
        f"\n3. searches of {configs} equal configurations ({n}; grid, one launch each, then "
        f"the race at confirm 6; CV {CV:.0%}, {FAILED:.0%} failed, {LIMITED:.0%} "
        "client-limited): the answer's effect against the default"
    )
    out = [one_search(rng, configs) for _ in range(n)]
    fresh = sum(v == Verdict.BETTER.value for v, _ in out)
    reused = sum(r == Verdict.BETTER.value for _, r in out)
    default_best = sum(v.startswith("the default is the best") for v, _ in out)
    print("| effect measured on | 'better' | 'worse' |")
    print("|---|---:|---:|")
    worse = sum(v == Verdict.WORSE.value for v, _ in out)
    print(
        f"| fresh launches of the winner and the default (the product) | {fresh / n:.1%} | "
        f"{worse / n:.1%} |"
    )
    print(
        f"| the winner's race launches (the launches that chose it) | {reused / n:.1%} | "
        f"{sum(r == Verdict.WORSE.value for _, r in out) / n:.1%} |"
    )
    print(f"(the default itself won in {default_best} of {n}: no effect to give)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the runs")
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    started = time.perf_counter()
    races(1000 // scale, args.seed)
    reports(200 // scale, args.seed + 1)
    searches(300 // scale, args.seed + 2)
    print(f"\n(computed in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
