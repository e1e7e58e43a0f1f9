"""Do compare's 95 % intervals hold 95 %? Welch on the log ratio (ours) beside a percentile
bootstrap of the ratio of means (the usual alternative), on synthetic launches with a known
effect, at the repeat counts people use (3, 5, 10) and two launch-to-launch spreads.

Printed per row: how often the interval holds the true ratio (coverage; 0.95 is honest), its
mean width, and how often a null change (true ratio 1) is called better or worse at
--min-effect 2 % (false verdicts; at most ~5 % is honest).

    taskset -c 0 .venv/bin/python -P benchmarks/interval_coverage.py [--trials 1000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from tunelab.analysis.intervals import Cell, contrast, log_contrast
from tunelab.analysis.judge import Verdict, judge_pair
from tunelab.analysis.metrics import CATALOGUE

THROUGHPUT = CATALOGUE["output_throughput"]

TRUE_RATIO = 1.10


def welch(base: list[float], variant: list[float]) -> tuple[float, float]:
    estimate = log_contrast([(-1.0, Cell(tuple(base))), (1.0, Cell(tuple(variant)))])
    if estimate is None:
        raise ValueError("launches must be positive, at least 2 a side")
    lo, hi = estimate.relative_interval()
    return 1.0 + lo, 1.0 + hi


def bootstrap(
    base: list[float], variant: list[float], rng: random.Random, resamples: int
) -> tuple[float, float]:
    ratios = sorted(
        statistics.fmean(rng.choices(variant, k=len(variant)))
        / statistics.fmean(rng.choices(base, k=len(base)))
        for _ in range(resamples)
    )
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def launches(rng: random.Random, n: int, mean: float, cv: float) -> list[float]:
    return [max(rng.gauss(mean, cv * mean), 1e-9) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{args.trials} trials per row, bootstrap {args.resamples} resamples, seed {args.seed}")
    header = (
        f"{'n':>3} {'cv':>5} | {'method':<10} {'coverage':>8} {'width':>7} "
        f"{'false verdict':>13} | seconds"
    )
    print(header)
    print("-" * len(header))
    for n in (3, 5, 10):
        for cv in (0.01, 0.05):
            for name in ("welch-log", "bootstrap"):
                started = time.perf_counter()
                hits, widths, false = 0, [], 0
                for _ in range(args.trials):
                    base = launches(rng, n, 100.0, cv)
                    var = launches(rng, n, 100.0 * TRUE_RATIO, cv)
                    null = launches(rng, n, 100.0, cv)
                    if name == "welch-log":
                        lo, hi = welch(base, var)
                        nlo, nhi = welch(base, null)
                    else:
                        lo, hi = bootstrap(base, var, rng, args.resamples)
                        nlo, nhi = bootstrap(base, null, rng, args.resamples)
                    hits += lo <= TRUE_RATIO <= hi
                    widths.append(hi - lo)
                    if name == "welch-log":  # the product's rule: the one judge
                        found = judge_pair(
                            contrast(null, base),
                            THROUGHPUT,
                            margin=0.02,
                            confidence=0.95,
                            launches=(n, n),
                        ).verdict
                        false += found in (Verdict.BETTER, Verdict.WORSE)
                    else:  # a bootstrap interval has no estimate to judge: separated from 1
                        false += not nlo <= 1.0 <= nhi
                print(
                    f"{n:>3} {cv:>5.0%} | {name:<10} {hits / args.trials:>8.3f} "
                    f"{statistics.fmean(widths):>7.4f} {false / args.trials:>13.3f} | "
                    f"{time.perf_counter() - started:.1f}"
                )


if __name__ == "__main__":
    main()
