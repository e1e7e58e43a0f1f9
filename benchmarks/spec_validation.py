"""Search-spec validation time by number of axes (issue 36.2; goal: the 500-axis spec refused or
validated in well under a second).

Each spec is the issue's shape: a small base document and ``search.space`` of N list axes
(``server.flags.--fI: [1, 2]``), about 21 KB at 500 axes. For each N, the time of
``search_from_text`` (what ``submit`` and ``--dry-run`` run), the median of a few runs:
"cap lifted" times the validation itself with ``MAX_AXES`` raised past N (the work a spec below
the cap costs, per axis); "as shipped" is what a user gets (a refusal above the cap).

    python benchmarks/spec_validation.py [--axes 16,64,200,500] [--runs 3]

Runs against any source checkout: ``PYTHONPATH=/other/checkout/controller:...`` measures the old
code (its ``MAX_AXES``, if any, is raised the same way).
"""

from __future__ import annotations

import argparse
import statistics
import time

from tunelab.controller.search import space
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.spec.errors import SpecError

BASE = """name: s
server: {command: [sim], flags: {--port: "{port}"}, port: auto, ready: {model: m}}
benchmark: {requests: 10, input_len: 8, output_len: 8}
search:
  objective: {maximize: output_throughput}
  load: {concurrency: [1]}
  budget: {trials: 10}
  space:
"""


def spec_text(axes: int) -> str:
    return BASE + "".join(f"    server.flags.--f{i}: [1, 2]\n" for i in range(axes))


def timed(text: str, runs: int) -> tuple[float, str]:
    times, outcome = [], ""
    for _ in range(runs):
        started = time.perf_counter()
        try:
            search_from_text(text)
            outcome = "valid"
        except SpecError as exc:
            outcome = "refused: " + str(exc).splitlines()[-1].strip()[:60]
        times.append(time.perf_counter() - started)
    return statistics.median(times), outcome


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--axes", default="16,64,200,500")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cap = getattr(space, "MAX_AXES", None)
    print(f"MAX_AXES as shipped: {cap}")
    print(f"{'axes':>6} {'spec KB':>8} {'mode':<12} {'seconds':>9}  outcome")
    for axes in (int(a) for a in args.axes.split(",")):
        text = spec_text(axes)
        kb = len(text.encode()) / 1024
        if cap is not None:
            space.MAX_AXES = max(cap, axes)
        seconds, outcome = timed(text, args.runs)
        print(f"{axes:>6} {kb:>8.1f} {'cap lifted':<12} {seconds:>9.4f}  {outcome}")
        if cap is not None:
            space.MAX_AXES = cap
            seconds, outcome = timed(text, args.runs)
            print(f"{axes:>6} {kb:>8.1f} {'as shipped':<12} {seconds:>9.4f}  {outcome}")


if __name__ == "__main__":
    main()
