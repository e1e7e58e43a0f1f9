"""How fast a watch catches a step, and how often it cries wolf (issue 38).

Simulated histories of ``output_throughput``: each occurrence has 3 launches whose values carry
independent noise of the given coefficient of variation around the occurrence's true level.

* false alarms: 100 occurrences with no change at all, baseline = the first; the verdict rule
  counts occurrences judged a regression or an improvement, the change-point detector counts the
  change points it marks over the 100-long history (its verdict as of the last occurrence);
* detection: 10 occurrences at the old level, then a step down of 5, 10 or 20 %; the verdict rule
  is asked after each new occurrence and detection is the first occurrence judged a regression;
  the detector is re-run over the history so far and detection is the first time it marks a
  change point within one occurrence of the true step. Reported as the median and 90th
  percentile over seeds of occurrences after the step (1 = the first changed occurrence);
  ">H" where it was not caught within H occurrences.

  python benchmarks/watch_detection.py [--seeds 40] [--margin 0.03]
"""

from __future__ import annotations

import argparse
import math
import statistics

import numpy as np

from tunelab.analysis.watch import Occurrence, change_points, judge_occurrence

LAUNCHES = 3
BEFORE = 10
HORIZON = 15
METRIC = "output_throughput"


def occurrence(rng: np.random.Generator, index: int, level: float, cv: float) -> Occurrence:
    values = tuple(float(v) for v in level * (1 + rng.normal(0, cv, LAUNCHES)))
    return Occurrence(index, 3600.0 * index, {METRIC: values}, {})


def false_alarms(cv: float, seed: int, margin: float) -> tuple[int, int]:
    rng = np.random.default_rng(seed)
    occs = [occurrence(rng, i, 1000.0, cv) for i in range(101)]
    rule = sum(
        judge_occurrence(o, occs[0], [METRIC], margin)["verdict"] in ("regression", "improvement")
        for o in occs[1:]
    )
    series = [(o.started_at, statistics.fmean(o.values[METRIC])) for o in occs[1:]]
    return rule, len(change_points(series))


def delays(cv: float, step: float, seed: int, margin: float) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    occs = [occurrence(rng, i, 1000.0, cv) for i in range(BEFORE)]
    occs += [occurrence(rng, BEFORE + i, 1000.0 * (1 - step), cv) for i in range(HORIZON)]
    rule = next(
        (
            k
            for k in range(1, HORIZON + 1)
            if judge_occurrence(occs[BEFORE + k - 1], occs[0], [METRIC], margin)["verdict"]
            == "regression"
        ),
        math.inf,
    )
    series = [(o.started_at, statistics.fmean(o.values[METRIC])) for o in occs]
    detector = math.inf
    for k in range(1, HORIZON + 1):
        found = change_points(series[: BEFORE + k])
        if any(abs(c["index"] - BEFORE) <= 1 for c in found):
            detector = k
            break
    return rule, detector


def summary(values: list[float]) -> str:
    def fmt(v: float) -> str:
        return f">{HORIZON}" if math.isinf(v) else f"{v:g}"

    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return f"{fmt(statistics.median(ordered))} / {fmt(p90)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--margin", type=float, default=0.03)
    args = parser.parse_args()
    print(
        f"{LAUNCHES} launches per occurrence, margin {args.margin:.0%}, {args.seeds} seeds; "
        "detection: occurrences after the step, median / p90"
    )
    header = f"{'noise CV':>8}  {'method':<14} {'false alarms/100':>16}"
    header += "".join(f"  {f'step {s:.0%}':>10}" for s in (0.05, 0.10, 0.20))
    print(header)
    for cv in (0.02, 0.05, 0.10):
        alarms = [false_alarms(cv, 1000 + s, args.margin) for s in range(args.seeds)]
        per_step = {
            step: [delays(cv, step, 2000 + s, args.margin) for s in range(args.seeds)]
            for step in (0.05, 0.10, 0.20)
        }
        for col, name in ((0, "verdict rule"), (1, "change points")):
            mean_alarms = statistics.fmean(a[col] for a in alarms)
            cells = "".join(
                f"  {summary([d[col] for d in per_step[step]]):>10}" for step in per_step
            )
            print(f"{cv:>8.0%}  {name:<14} {mean_alarms:>16.2f}{cells}", flush=True)


if __name__ == "__main__":
    main()
