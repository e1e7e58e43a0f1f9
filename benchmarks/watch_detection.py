"""How fast a watch catches a step, and how often it cries wolf (issues 38 and 43).

Simulated histories of ``output_throughput`` judged by the product's own path
(``tunelab.controller.watches.judging.judge`` over ``build_history``: the same pooled baseline,
bounded window, change points and state as the controller), held in memory instead of a store.
Each occurrence has 3 launches whose values carry independent noise of the given coefficient of
variation around the occurrence's true level.

* false alarms per 100 occurrences: 100 occurrences with no change, ``baseline: first``. The
  verdict rule counts occurrences judged regression or improvement; the change-point tester
  counts occurrences at which a new change point (a step of at least the margin) appears; the
  combined state counts alerts raised (the state entering ``regression``);
* detection: 10 occurrences at the old level, then a step down of 5, 10 or 20 %; occurrences
  after the step (1 = the first changed one) until the verdict rule calls a regression, until a
  change point marks the step, and until the state is ``regression``. Median / 90th percentile
  over seeds; ">15" where not within 15 occurrences.

  python benchmarks/watch_detection.py [--seeds 40] [--margin 0.03]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tunelab.controller.store.watch_models import OccurrenceRow
from tunelab.controller.watches.judging import build_history, judge
from tunelab.controller.watches.spec import WatchSpec

LAUNCHES = 3
BEFORE = 10
HORIZON = 15
METRIC = "output_throughput"


class Watch:
    """One watch's history in memory, judged occurrence by occurrence as the driver does."""

    def __init__(self, margin: float, baseline: str = "first") -> None:
        self.spec = WatchSpec("1h", 3600.0, "", LAUNCHES, baseline, 0, (METRIC,), margin)
        self.rows: list[OccurrenceRow] = []

    def _before(self, before: int, limit: int) -> Sequence[OccurrenceRow]:
        return self.rows[max(0, before - 1 - limit) : before - 1]

    def _after(self, after: int, limit: int) -> Sequence[OccurrenceRow]:
        return self.rows[after : after + limit]

    def occur(self, values: Sequence[float]) -> dict[str, Any]:
        number = len(self.rows) + 1
        row = OccurrenceRow("sim", number, f"g{number}", 3600.0 * number, 3600.0 * number)
        history = build_history(self.spec, number, self._before, self._after)
        found: tuple[dict[str, list[float]], dict[str, Any], int] = (
            {METRIC: list(values)},
            {},
            len(values),
        )
        doc = judge(self.spec, row, found, len(values), history)
        self.rows.append(OccurrenceRow(row.watch, number, row.group, row.due_at, row.started_at,
                                       doc, row.started_at))  # fmt: skip
        return doc


def launches(rng: np.random.Generator, level: float, cv: float) -> list[float]:
    return [float(v) for v in level * (1 + rng.normal(0, cv, LAUNCHES))]


def state(doc: dict[str, Any]) -> str:
    return str(doc["state"][METRIC]["state"])


def newest_point(doc: dict[str, Any]) -> int:
    return max((int(p["occurrence"]) for p in doc["change_points"]), default=0)


def false_alarms(cv: float, seed: int, margin: float) -> tuple[int, int, int]:
    rng = np.random.default_rng(seed)
    watch = Watch(margin)
    rule = points = alerts = 0
    seen_point, was = 0, ""
    for _ in range(100):
        doc = watch.occur(launches(rng, 1000.0, cv))
        rule += doc["verdict"] in ("regression", "improvement")
        if newest_point(doc) > seen_point:
            points += 1
            seen_point = newest_point(doc)
        alerts += state(doc) == "regression" and was != "regression"
        was = state(doc)
    return rule, points, alerts


def delays(cv: float, step: float, seed: int, margin: float) -> tuple[float, float, float]:
    rng = np.random.default_rng(seed)
    watch = Watch(margin)
    for _ in range(BEFORE):
        watch.occur(launches(rng, 1000.0, cv))
    start = len(watch.rows) + 1
    found = [math.inf, math.inf, math.inf]
    for k in range(1, HORIZON + 1):
        doc = watch.occur(launches(rng, 1000.0 * (1 - step), cv))
        hits = (
            doc["verdict"] == "regression",
            any(
                abs(int(p["occurrence"]) - start) <= 1 and p["shift"] == "worse"
                for p in doc["change_points"]
            ),
            state(doc) == "regression",
        )
        for i, hit in enumerate(hits):
            if hit and math.isinf(found[i]):
                found[i] = k
        if not any(math.isinf(f) for f in found):
            break
    return found[0], found[1], found[2]


def summary(values: list[float]) -> str:
    def one(q: float) -> str:
        v = float(np.quantile(values, q, method="higher"))
        return f">{HORIZON}" if math.isinf(v) else f"{v:.0f}"

    return f"{one(0.5)} / {one(0.9)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--margin", type=float, default=0.03)
    args = parser.parse_args()
    steps = (0.05, 0.10, 0.20)
    print(f"{args.seeds} seeds, {LAUNCHES} launches an occurrence, margin {100 * args.margin:g} %,"
          " baseline: first; detection: occurrences after the step, median / p90")  # fmt: skip
    header = f"{'noise CV':>8}  {'method':<14} {'false alarms/100':>17}"
    print(header + "".join(f"{f'step {100 * s:.0f}%':>12}" for s in steps))
    methods = ("verdict rule", "change points", "state")
    for cv in (0.02, 0.05, 0.10):
        alarms = np.array([false_alarms(cv, s, args.margin) for s in range(args.seeds)])
        caught = {
            step: np.array([delays(cv, step, 1000 + s, args.margin) for s in range(args.seeds)])
            for step in steps
        }
        for i, method in enumerate(methods):
            rate = float(alarms[:, i].mean())  # per 100 occurrences
            cells = "".join(f"{summary(list(caught[s][:, i])):>12}" for s in steps)
            print(f"{100 * cv:>7.0f}%  {method:<14} {rate:>17.2f}{cells}")


if __name__ == "__main__":
    main()
