"""How often does an A/A comparison call a change better or worse? (issue 35)

Simulated: reports of the demo's size (examples/demo-ablation.yaml: a baseline and 2 changes, 3
launches of each, 2 load points, 7 latency/throughput metrics a point and tokens per joule: 30
rows) where no change does anything, each launch's figures drawn with a launch-to-launch CV of
2-10 %, judged by the product's own code (tunelab.analysis.effects) three ways: each row alone
at 95 % (before issue 35), Benjamini-Hochberg across the report (the default) and Holm. Printed
per CV: the share of reports that call any change better or worse (the goal: <= 5 %).

Real (``--real N``): the demo's ablation submitted N times to a local agent and controller (as
``make demo`` starts them; the simulator ignores ``--tag``), each submission compared; printed:
how many flag the no-op, each row alone and corrected, and how many find the real --itl-ms=5.

    .venv/bin/python -P benchmarks/false_discoveries.py [--reports 1000] [--real 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from tunelab.analysis.effects import (
    BETTER,
    WORSE,
    EffectSettings,
    Row,
    Variant,
    ablation_effects,
    effects_document,
    judge_rows,
)
from tunelab.analysis.intervals import Cell, Method
from tunelab.analysis.metrics import COMPARED
from tunelab.common.pyexec import python_module_argv

CHANGES = 2  # the demo's: --itl-ms=5 and --tag=no-op
POINTS = ("c1", "c4")
LAUNCHES = 3  # the demo's repeat
CVS = (0.02, 0.03, 0.05, 0.07, 0.10)
METHODS = {"each row alone": Method.NONE, "BH": Method.BH, "Holm": Method.HOLM}


def variant(rng: random.Random, label: str, cv: float, shared: float) -> Variant:
    """One variant's launches: every metric at every point is its true value times a launch
    factor (``shared`` of the variance: a slow launch is slow everywhere) and its own noise."""
    cells: dict[tuple[str, str], list[float]] = {}
    for _ in range(LAUNCHES):
        launch = rng.gauss(0.0, cv * math.sqrt(shared))
        for metric in (m.name for m in COMPARED):
            points = ("all",) if metric == "tokens_per_joule" else POINTS
            for point in points:
                own = rng.gauss(0.0, cv * math.sqrt(1.0 - shared))
                cells.setdefault((metric, point), []).append(100.0 * math.exp(launch + own))
    varied = {"server.flags.--x": label} if label != "baseline" else {}
    return Variant(label, label, varied, {k: Cell(tuple(v)) for k, v in cells.items()}, POINTS)


def calls(rows: list[Row]) -> bool:
    return any(r.out["verdict"] in (BETTER, WORSE) for r in rows)


def simulate(reports: int, seed: int, shared: float) -> None:
    rng = random.Random(seed)
    print(
        f"\nsimulated A/A reports: a baseline and {CHANGES} null changes, {LAUNCHES} launches "
        f"each, {len(POINTS)} points; {reports} reports per CV; launch factor {shared:.0%} of "
        f"the variance; seed {seed}"
    )
    names = list(METHODS)
    print(f"{'CV':>5} {'rows':>5} | " + " | ".join(f"{n:>14}" for n in names) + " | seconds")
    for cv in CVS:
        start = time.perf_counter()
        called = dict.fromkeys(names, 0)
        tested = 0
        for _ in range(reports):
            base = variant(rng, "baseline", cv, shared)
            changes = [variant(rng, f"change{i}", cv, shared) for i in range(CHANGES)]
            rows = ablation_effects(base, changes)
            for name, method in METHODS.items():
                correction = judge_rows(rows, EffectSettings(correction=method))
                called[name] += calls(rows)
            tested += correction["family_size"]
        shares = " | ".join(f"{called[n] / reports:>13.1%} " for n in names)
        seconds = time.perf_counter() - start
        print(f"{cv:>5.0%} {tested / reports:>5.1f} | {shares} | {seconds:.1f}")
    print(
        "(rows: the mean number tested a report; a row with a cell noisier than --max-cv 10 %"
        " is tested but not judged)"
    )


# --- real A/A ablations on this machine -------------------------------------------------------


def real(count: int) -> None:
    """The demo's daemons (tunelab.controller.demo), the demo's spec submitted ``count`` times,
    each submission compared; the no-op's rows judged alone and across the report."""
    from tunelab.controller import demo

    workdir = Path(tempfile.mkdtemp(prefix="tunelab-aa-"))
    agent, controller = f"127.0.0.1:{demo._free_port()}", f"127.0.0.1:{demo._free_port()}"
    env = {**os.environ, "TUNELAB_CONTROLLER": controller,
           "XDG_CONFIG_HOME": str(workdir / "config")}  # fmt: skip
    agent_argv = python_module_argv("tunelab.agent", "serve", "--listen", agent)
    agent_argv += ["--state-dir", str(workdir / "agent"), "--nvml-snapshot", str(demo.SNAPSHOT)]
    controller_argv = python_module_argv(
        "tunelab.cli", "controller", "serve", "--listen", controller
    )
    controller_argv += ["--db", str(workdir / "controller.db"), "--host-poll-interval", "0.5s",
                        "--attempt-poll-interval", "0.25s"]  # fmt: skip

    def cli(*args: str) -> str:
        done = subprocess.run(python_module_argv("tunelab.cli", *args), cwd=demo.REPO, env=env,
                              text=True, capture_output=True, check=True)  # fmt: skip
        return done.stdout

    start = time.monotonic()
    with ExitStack() as stack:
        stack.enter_context(demo._daemon("agent", agent_argv, agent, workdir / "agent.log", env))
        stack.enter_context(
            demo._daemon("controller", controller_argv, controller, workdir / "c.log", env)
        )
        cli("hosts", "add", "local", agent, "--label", "pool=demo")
        demo._host_ready(controller, "local")
        groups = []
        for _ in range(count):
            submitted = json.loads(cli("submit", str(demo.SPEC), "--json"))
            groups.append(submitted[0]["group"])
        for group in groups:
            cli("wait", group, "--json")
        documents = [json.loads(cli("compare", group, "--json")) for group in groups]
    minutes = (time.monotonic() - start) / 60
    print(f"\nreal A/A: the demo's ablation {count} times on this machine ({minutes:.1f} min)")
    print(f"{'judged':<16} {'no-op flagged':>14} {'--itl-ms=5 better on tok/s':>27}")
    for name, method in METHODS.items():
        flagged = found = 0
        for doc in documents:
            effects = effects_document(doc["experiments"], EffectSettings(correction=method))
            mine = [e for e in effects["effects"] if e["change"] == "--tag=no-op"]
            flagged += any(e["verdict"] in (BETTER, WORSE) for e in mine)
            found += all(
                e["verdict"] == BETTER
                for e in effects["effects"]
                if e["change"] == "--itl-ms=5" and e["metric"] == "output_throughput"
            )
        print(f"{name:<16} {flagged:>9} of {count:<2} {found:>22} of {count}")
    flagged_rows = [
        f"{e['metric']}@{e['point']} {100 * (e['ratio'] - 1):+.1f}%"
        for doc in documents
        for e in doc["effects"]
        if e["change"] == "--tag=no-op" and e["verdict"] in (BETTER, WORSE)
    ]
    print(f"no-op rows the product (BH) called: {flagged_rows or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument(
        "--shared", type=float, default=0.5, help="share of a launch's variance all rows share"
    )
    parser.add_argument("--real", type=int, default=0, metavar="N", help="N real A/A ablations")
    args = parser.parse_args()
    if args.reports:
        simulate(args.reports, args.seed, args.shared)
    if args.real:
        real(args.real)


if __name__ == "__main__":
    main()
