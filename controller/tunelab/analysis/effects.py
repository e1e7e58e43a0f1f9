"""Which change made the difference: effects of each ablation step or matrix factor level over
repeated launches, with a 95 % interval and a verdict (README, "Effects").

Input is the ``experiments`` list of a compare document (one row per launch); output is the
``effects`` list of ``tunelab compare --json`` plus, for a matrix, its interactions. The same
function serves the controller (default thresholds) and the CLI (``--min-effect``, ``--max-cv``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.intervals import Cell, Estimate, log_contrast

# metric -> True when higher is better
METRICS: dict[str, bool] = {
    "output_throughput": True,
    "median_ttft_ms": False,
    "p99_ttft_ms": False,
    "median_tpot_ms": False,
    "p99_tpot_ms": False,
    "median_itl_ms": False,
    "p99_itl_ms": False,
    "tokens_per_joule": True,
}
METRIC_LABELS = {
    "output_throughput": "tok/s",
    "median_ttft_ms": "TTFT p50",
    "p99_ttft_ms": "TTFT p99",
    "median_tpot_ms": "TPOT p50",
    "p99_tpot_ms": "TPOT p99",
    "median_itl_ms": "ITL p50",
    "p99_itl_ms": "ITL p99",
    "tokens_per_joule": "tok/J",
}
WHOLE_RUN = "all"  # the point of a per-run figure (tokens per joule over the whole sweep)
MIN_REPEATS = 3
BETTER, WORSE = "better", "worse"
NO_DIFFERENCE = "no meaningful difference"
NOT_ENOUGH = "not enough repeats"
INTERACTION, NO_INTERACTION = "interaction", "no meaningful interaction"
_REPEAT = re.compile(r"#\d+$")


@dataclass(frozen=True)
class EffectSettings:
    min_effect: float = 0.02  # an interval inside +-2 % is "no meaningful difference"
    max_cv: float = 0.10  # a cell noisier than this is "not enough repeats"

    def to_dict(self) -> dict[str, float]:
        return {"min_effect": self.min_effect, "max_cv": self.max_cv, "confidence": 0.95}


@dataclass(frozen=True)
class Variant:
    name: str  # without the "#n" of its launches
    label: str  # the part after "experiment/", e.g. "--itl-ms=5"
    varied: dict[str, str]
    cells: dict[tuple[str, str], Cell]  # (metric, point) -> values over successful launches
    points: tuple[str, ...]


def _finite(value: Any) -> bool:
    """A number to count: an external benchmark's result may hold anything, NaN included."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _variants(rows: Sequence[dict[str, Any]]) -> list[Variant]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[_REPEAT.sub("", row["name"])].append(row)
    out = []
    for name, members in grouped.items():
        values: dict[tuple[str, str], list[float]] = defaultdict(list)
        points: list[str] = []
        for row in members:
            if row["state"] != "SUCCEEDED":
                continue
            for point in row["points"]:
                if point["key"] not in points:
                    points.append(point["key"])
                for metric in METRICS:
                    if _finite(point.get(metric)):
                        values[(metric, point["key"])].append(float(point[metric]))
            if _finite(row.get("tokens_per_joule")):
                values[("tokens_per_joule", WHOLE_RUN)].append(float(row["tokens_per_joule"]))
        label = name.split("/", 1)[1] if "/" in name else name
        cells = {key: Cell(tuple(v)) for key, v in values.items()}
        out.append(Variant(name, label, dict(members[0]["varied"]), cells, tuple(points)))
    return out


def judge(
    interval: tuple[float, float] | None,
    cells: Iterable[Cell],
    higher_better: bool,
    settings: EffectSettings,
    named: tuple[str, str, str] = (BETTER, WORSE, NO_DIFFERENCE),
) -> str:
    """The verdict on a relative-change interval (README, "Verdicts")."""
    up, down, none = named if higher_better else (named[1], named[0], named[2])
    if interval is None or any(c.n < MIN_REPEATS or c.cv > settings.max_cv for c in cells):
        return NOT_ENOUGH
    lo, hi = interval
    if -settings.min_effect <= lo and hi <= settings.min_effect:
        return none
    if lo > 0:
        return up
    if hi < 0:
        return down
    return NOT_ENOUGH  # spans 0 and reaches past the minimum effect: more launches would decide


def _effect(
    change: str,
    metric: str,
    point: str,
    base: Sequence[Cell],
    variant: Sequence[Cell],
    settings: EffectSettings,
) -> dict[str, Any]:
    """Variant cells against baseline cells, paired in order (one pair per combination of the
    other factors); the estimate is the mean of the pairs' log ratios."""
    k = len(base)
    estimate = log_contrast([(-1.0 / k, c) for c in base] + [(1.0 / k, c) for c in variant])
    interval = estimate.relative_interval() if estimate else None
    return {
        "change": change,
        "point": point,
        "metric": metric,
        "baseline_mean": _mean_of_means(base),
        "mean": _mean_of_means(variant),
        "ratio": estimate.ratio if estimate else None,
        "ci95": list(interval) if interval else None,
        "n_baseline": sum(c.n for c in base),
        "n_variant": sum(c.n for c in variant),
        "verdict": judge(interval, [*base, *variant], METRICS[metric], settings),
    }


def _mean_of_means(cells: Sequence[Cell]) -> float | None:
    known = [c.mean for c in cells if c.n]
    return sum(known) / len(known) if known else None


def _keys(variants: Sequence[Variant]) -> list[tuple[str, str]]:
    points: list[str] = []
    for v in variants:
        points += [p for p in v.points if p not in points]
    keys = [(m, p) for m in METRICS if m != "tokens_per_joule" for p in points]
    if any(("tokens_per_joule", WHOLE_RUN) in v.cells for v in variants):
        keys.append(("tokens_per_joule", WHOLE_RUN))
    return keys


def _factor_label(path: str, value: str) -> str:
    parts = path.split(".", 2)
    key = parts[2] if len(parts) == 3 and parts[:2] == ["server", "flags"] else path
    return f"{key}={value}"


# --- ablation --------------------------------------------------------------------------------


def ablation_effects(
    baseline: Variant, changes: Sequence[Variant], settings: EffectSettings
) -> list[dict[str, Any]]:
    out = []
    for change in changes:
        for metric, point in _keys([baseline, change]):
            base, var = baseline.cells.get((metric, point)), change.cells.get((metric, point))
            if base is None or var is None:
                continue
            out.append(_effect(change.label, metric, point, [base], [var], settings))
    return out


# --- matrix ----------------------------------------------------------------------------------


def _levels(variants: Sequence[Variant]) -> dict[str, list[str]]:
    """Each factor's levels in submission order; the first is its baseline level."""
    levels: dict[str, list[str]] = {}
    for v in variants:
        for path, value in v.varied.items():
            seen = levels.setdefault(path, [])
            if value not in seen:
                seen.append(value)
    return levels


def matrix_effects(
    variants: Sequence[Variant], settings: EffectSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Main effects (each level against its factor's first level, averaged over the other
    factors' combinations) and every two-factor interaction (a ratio of ratios)."""
    levels = _levels(variants)
    by_levels = {tuple(sorted(v.varied.items())): v for v in variants}

    def cell(assign: dict[str, str], key: tuple[str, str]) -> Cell | None:
        variant = by_levels.get(tuple(sorted(assign.items())))
        return variant.cells.get(key) if variant else None

    def others(skip: Sequence[str]) -> list[dict[str, str]]:
        names = [f for f in levels if f not in skip]
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(levels[f] for f in names))
        ]

    keys = _keys(variants)
    effects: list[dict[str, Any]] = []
    for factor, values in levels.items():
        for level in values[1:]:
            for key in keys:
                pairs = [
                    (cell({**rest, factor: values[0]}, key), cell({**rest, factor: level}, key))
                    for rest in others([factor])
                ]
                known = [(b, v) for b, v in pairs if b is not None and v is not None]
                if known:
                    base, var = [b for b, _ in known], [v for _, v in known]
                    label = _factor_label(factor, level)
                    effects.append(_effect(label, key[0], key[1], base, var, settings))
    interactions = []
    for fa, fb in itertools.combinations(levels, 2):
        for a, b in itertools.product(levels[fa][1:], levels[fb][1:]):
            a0, b0 = levels[fa][0], levels[fb][0]
            for key in keys:
                terms: list[tuple[float, Cell]] = []
                combos = others([fa, fb])
                for rest in combos:
                    quad = [(1.0, a, b), (-1.0, a0, b), (-1.0, a, b0), (1.0, a0, b0)]
                    found = [(w, cell({**rest, fa: x, fb: y}, key)) for w, x, y in quad]
                    if all(c is not None for _, c in found):
                        terms += [(w / len(combos), c) for w, c in found if c is not None]
                if terms:
                    change = f"{_factor_label(fa, a)} x {_factor_label(fb, b)}"
                    interactions.append(_interaction(change, key, terms, settings))
    return effects, interactions


def _interaction(
    change: str, key: tuple[str, str], terms: list[tuple[float, Cell]], settings: EffectSettings
) -> dict[str, Any]:
    estimate: Estimate | None = log_contrast(terms)
    interval = estimate.relative_interval() if estimate else None
    named = (INTERACTION, INTERACTION, NO_INTERACTION)
    verdict = judge(interval, [c for _, c in terms], True, settings, named)
    return {
        "change": change,
        "point": key[1],
        "metric": key[0],
        "ratio": estimate.ratio if estimate else None,  # (ab / a0b) / (ab0 / a0b0)
        "ci95": list(interval) if interval else None,
        "verdict": verdict,
    }


def largest_interactions(interactions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per metric, the interaction furthest from a ratio of 1."""
    best: dict[str, dict[str, Any]] = {}
    for item in interactions:
        if item["ratio"] is None:
            continue
        size = abs(math.log(item["ratio"]))
        held = best.get(item["metric"])
        if held is None or size > abs(math.log(held["ratio"])):
            best[item["metric"]] = item
    return [best[m] for m in METRICS if m in best]


# --- entry point -----------------------------------------------------------------------------


def effects_document(
    rows: Sequence[dict[str, Any]], settings: EffectSettings | None = None
) -> dict[str, Any]:
    """``{"design", "settings", "effects", "interactions", "largest_interactions"}`` for the
    launches in ``rows``; design is "ablation", "matrix" or "none" (nothing to compare)."""
    settings = settings or EffectSettings()
    variants = _variants(rows)
    out: dict[str, Any] = {
        "design": "none",
        "settings": settings.to_dict(),
        "effects": [],
        "interactions": [],
        "largest_interactions": [],
    }
    baselines = [v for v in variants if not v.varied]
    factors = {tuple(sorted(v.varied)) for v in variants}
    if len(baselines) == 1 and len(variants) > 1:
        out["design"] = "ablation"
        others = [v for v in variants if v.varied]
        out["effects"] = ablation_effects(baselines[0], others, settings)
    elif not baselines and len(factors) == 1 and len(variants) > 1:
        out["design"] = "matrix"
        out["effects"], out["interactions"] = matrix_effects(variants, settings)
        out["largest_interactions"] = largest_interactions(out["interactions"])
    return out
