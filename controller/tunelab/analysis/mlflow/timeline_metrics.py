"""An attempt's timeline as MLflow step metrics: one metric per series (``timeline.<series>``,
e.g. ``timeline.gpu0.power_watts``), the step being the window's index and the window's
time from the benchmark's start in seconds being ``timeline.t_s`` at the same step. Bounded: past
:data:`MAX_VALUES` values the windows are strided, so one attempt logs at most that many."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_VALUES = 20_000


def timeline_metrics(timeline: Mapping[str, Any] | None) -> list[tuple[str, float, int]]:
    """(key, value, step) for every recorded value of ``timeline`` (a timeline document)."""
    if not timeline or not isinstance(timeline.get("series"), Mapping):
        return []
    series: Mapping[str, list[Any]] = timeline["series"]
    windows = int(timeline.get("windows") or 0)
    step_s = float(timeline.get("step_seconds") or 1.0)
    per_window = len(series) + 1
    stride = max(1, -(-windows * per_window // MAX_VALUES))
    out: list[tuple[str, float, int]] = []
    for w in range(0, windows, stride):
        out.append(("timeline.t_s", round(w * step_s, 3), w))
        for name, values in series.items():
            value = values[w] if w < len(values) else None
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.append((f"timeline.{name}", float(value), w))
    return out
