"""Two sets of profiles side by side: per category and for the kernels that changed most.

Each side is one or more summaries (repeats of the same variant). Times are normalised so the
two sides compare even when their windows differ in length: per output token when every
summary knows its window's output tokens, else per engine step when every one has steps, else
per second of wall time profiled. With two or more repeats on each side, the difference gets a
95 % Welch t interval (``tunelab.analysis.intervals``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.intervals import CONFIDENCE, t_quantile
from tunelab.analysis.profiles.categories import CATEGORIES, categorize
from tunelab.analysis.profiles.summary import CPU, GPU, ProfileSummary

PER_TOKEN = "ms/token"  # noqa: S105 (a unit, not a secret)
PER_STEP = "ms/step"
PER_SECOND = "ms/s"


@dataclass(frozen=True)
class DiffRow:
    name: str
    category: str
    a: float  # mean over side A's summaries, in the diff's unit
    b: float
    delta: float  # b - a
    ratio: float | None  # b / a
    interval: tuple[float, float] | None  # of delta, with repeats on both sides

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category,
            "a": round(self.a, 6),
            "b": round(self.b, 6),
            "delta": round(self.delta, 6),
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "interval": None if self.interval is None else [round(x, 6) for x in self.interval],
        }


@dataclass(frozen=True)
class ProfileDiff:
    unit: str
    basis: str  # "gpu" or "cpu"
    repeats: tuple[int, int]
    categories: tuple[DiffRow, ...]
    kernels: tuple[DiffRow, ...]
    gpu_idle_share: tuple[float | None, float | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "basis": self.basis,
            "repeats": list(self.repeats),
            "categories": [r.to_json() for r in self.categories],
            "kernels": [r.to_json() for r in self.kernels],
            "gpu_idle_share": list(self.gpu_idle_share),
        }


def _unit(summaries: Sequence[ProfileSummary]) -> tuple[str, Callable[[ProfileSummary], float]]:
    if all(s.output_tokens for s in summaries):
        return PER_TOKEN, lambda s: float(s.output_tokens or 1)
    if all(s.steps is not None and s.steps.count for s in summaries):
        return PER_STEP, lambda s: float(s.steps.count if s.steps else 1)
    return PER_SECOND, lambda s: max(s.wall_ms / 1000.0, 1e-9)


def _interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    delta = statistics.fmean(b) - statistics.fmean(a)
    if se == 0.0:
        return (delta, delta)
    df = (va + vb) ** 2 / (
        (va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0)
    )
    half = t_quantile(0.5 + CONFIDENCE / 2, df) * se
    return (delta - half, delta + half)


def _row(name: str, category: str, a: list[float], b: list[float]) -> DiffRow:
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    return DiffRow(
        name=name,
        category=category,
        a=mean_a,
        b=mean_b,
        delta=mean_b - mean_a,
        ratio=mean_b / mean_a if mean_a else None,
        interval=_interval(a, b),
    )


def diff(
    side_a: Sequence[ProfileSummary], side_b: Sequence[ProfileSummary], top: int = 10
) -> ProfileDiff:
    """B against A: positive deltas mean B spends more time."""
    if not side_a or not side_b:
        raise ValueError("each side of a diff needs at least one profile")
    unit, denominator = _unit([*side_a, *side_b])
    gpu = all(s.categories_basis == GPU for s in [*side_a, *side_b])
    basis = GPU if gpu else CPU

    def per_unit(
        side: Sequence[ProfileSummary], value: Callable[[ProfileSummary], float]
    ) -> list[float]:
        return [value(s) / denominator(s) for s in side]

    categories = tuple(
        _row(c, c, per_unit(side_a, _category(c)), per_unit(side_b, _category(c)))
        for c in CATEGORIES
    )
    names = {key for s in [*side_a, *side_b] for key in s.by_name if key[0] == basis}
    category_of = {(t.kind, t.name): t.category for s in [*side_a, *side_b] for t in s.top}
    rows = []
    for key in names:
        rows.append(
            _row(
                key[1],
                category_of.get(key) or categorize(key[1]),
                per_unit(side_a, _kernel(key)),
                per_unit(side_b, _kernel(key)),
            )
        )
    rows.sort(key=lambda r: (-abs(r.delta), r.name))
    idle_a = _mean_or_none([s.gpu_idle_share for s in side_a])
    idle_b = _mean_or_none([s.gpu_idle_share for s in side_b])
    return ProfileDiff(
        unit=unit,
        basis=basis,
        repeats=(len(side_a), len(side_b)),
        categories=categories,
        kernels=tuple(rows[:top]),
        gpu_idle_share=(idle_a, idle_b),
    )


def _category(name: str) -> Callable[[ProfileSummary], float]:
    return lambda s: s.categories.get(name, 0.0)


def _kernel(key: tuple[str, str]) -> Callable[[ProfileSummary], float]:
    return lambda s: s.by_name.get(key, (0, 0))[0] / 1e6


def _mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.fmean(present), 6) if present else None
