"""A typed, read-only view of a timeline document, checked as it is read: the controller
stores what an agent sent, so a malformed document is refused (``TimelineError``), never half
read."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunelab.bench.timeline.document import VERSION, Value


class TimelineError(ValueError):
    """The document is not a timeline this version reads."""


@dataclass(frozen=True)
class PointSpan:
    """One load point on the axis, seconds from the timeline's start."""

    index: int
    start_s: float
    measure_s: float  # the warm-up ends here
    end_s: float
    ramp: bool = False  # its rate rises on purpose (no throughput step is read there)


@dataclass(frozen=True)
class Timeline:
    step: float
    start: float  # epoch seconds of window 0 (the agent's clock)
    windows: int
    series: Mapping[str, Sequence[Value]]
    points: tuple[PointSpan, ...] = ()
    gpus: tuple[Mapping[str, Any], ...] = ()
    engine: str = ""
    batch_flag: str = ""
    downsampled: int = 1
    dropped_series: tuple[str, ...] = field(default_factory=tuple)

    def get(self, name: str) -> Sequence[Value]:
        """The series, or all-None when it was not recorded."""
        return self.series.get(name) or [None] * self.windows

    def t(self, window: int) -> float:
        """Seconds from the start to the window's start."""
        return window * self.step

    def point_at(self, window: int) -> PointSpan | None:
        mid = (window + 0.5) * self.step
        return next((p for p in self.points if p.start_s <= mid < p.end_s), None)

    def gpu_indices(self) -> list[int]:
        found = {int(n[3:].split(".", 1)[0]) for n in self.series if n.startswith("gpu")}
        return sorted(found)


def parse(doc: Mapping[str, Any]) -> Timeline:
    """The document as a :class:`Timeline`; TimelineError naming what is wrong."""
    if not isinstance(doc, Mapping) or doc.get("timeline") != VERSION:
        raise TimelineError(f"timeline: expected version {VERSION}")
    step = _number(doc.get("step_seconds"), "step_seconds")
    if step <= 0:
        raise TimelineError("step_seconds: must be > 0")
    windows = int(_number(doc.get("windows", 0), "windows"))
    raw = doc.get("series") or {}
    if not isinstance(raw, Mapping):
        raise TimelineError("series: expected an object")
    series: dict[str, list[Value]] = {}
    for name, values in raw.items():
        if not isinstance(values, list) or len(values) != windows:
            raise TimelineError(f"series.{name}: expected {windows} values")
        series[str(name)] = [_value(v, f"series.{name}") for v in values]
    points = tuple(
        PointSpan(
            int(p["index"]),
            _number(p["start_s"], "points"),
            _number(p["measure_s"], "points"),
            _number(p["end_s"], "points"),
            bool(p.get("ramp")),
        )
        for p in doc.get("points") or []
        if isinstance(p, Mapping)
    )
    return Timeline(
        step=step,
        start=_number(doc.get("start", 0.0), "start"),
        windows=windows,
        series=series,
        points=points,
        gpus=tuple(g for g in doc.get("gpus") or [] if isinstance(g, Mapping)),
        engine=str(doc.get("engine") or ""),
        batch_flag=str(doc.get("batch_flag") or ""),
        downsampled=int(doc.get("downsampled") or 1),
        dropped_series=tuple(str(n) for n in doc.get("dropped_series") or []),
    )


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TimelineError(f"{name}: expected a finite number")
    return float(value)


def _value(value: Any, name: str) -> Value:
    return None if value is None else _number(value, name)
