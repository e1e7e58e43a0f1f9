"""The timeline document: windows of one fixed step on the agent's clock, one list per series.

A JSON object, columnar so that an hour of thirty series stays near a megabyte::

    {"timeline": 1, "step_seconds": 1.0, "start": <epoch s of window 0>, "windows": N,
     "series": {"client.completed": [3, 5, ...], "gpu0.power_watts": [412.5, null, ...]},
     "points": [{"index": 0, "start_s": 0.0, "measure_s": 4.1, "end_s": 64.2}],
     "gpus": [{"power_limit_watts": 700.0, "sm_clock_max_hertz": 1980000000}],
     "engine": "vllm", "downsampled": 1, "dropped_series": []}

Window ``i`` covers ``[start + i*step, start + (i+1)*step)``. ``null`` is "not read in this
window" (a GPU that does not support the field, an engine that did not answer). Counts
(:data:`SUM_SERIES`) are per window; gauges are the window's mean; percentiles and the throttle
bitmask the window's worst. :func:`bounded` keeps a document under :data:`MAX_VALUES` values by
merging adjacent windows (the step grows by a whole factor) and dropping series past
:data:`MAX_SERIES`, saying so in the document.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

VERSION = 1
DEFAULT_STEP_SECONDS = 1.0
MIN_STEP_SECONDS = 0.1
MAX_STEP_SECONDS = 60.0
MAX_SERIES = 160
MAX_VALUES = 120_000  # windows x series per attempt: about a megabyte of JSON
MAX_POINTS = 1000
MAX_CORES = 64  # per-core CPU series kept; the busiest core is always kept as host.cpu_max_ratio

Value = float | None

# per-window counts: merged by adding
SUM_SERIES = frozenset(
    {
        "client.sent",
        "client.completed",
        "client.errors",
        "client.output_tokens",
        "engine.preemptions",
        "engine.prefix_cache_hits",
        "engine.prefix_cache_queries",
        "engine.generation_tokens",
    }
)


def merge_kind(name: str) -> str:
    """How a series' adjacent windows merge: ``sum``, ``max`` (worst) or ``mean``."""
    if name in SUM_SERIES:
        return "sum"
    if name.endswith(("_p50_ms", "_p99_ms", "clock_event_reasons", "_max_ratio")):
        return "max"
    return "mean"


def merged(values: Sequence[Value], kind: str) -> Value:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if kind == "sum":
        return float(sum(present))
    if kind == "max":
        return max(present)
    return sum(present) / len(present)


def downsample(series: Sequence[Value], factor: int, kind: str) -> list[Value]:
    """``series`` with each ``factor`` adjacent windows merged into one."""
    return [merged(series[i : i + factor], kind) for i in range(0, len(series), factor)]


def rounded(value: Value) -> Value:
    """Five significant digits: what a chart or an event needs, at a third of the bytes."""
    if value is None or not math.isfinite(value):
        return None
    if value == 0:
        return 0.0
    digits = 4 - math.floor(math.log10(abs(value)))
    return round(value, max(0, digits)) if digits > 0 else float(round(value, digits))


def bounded(doc: dict[str, Any], max_values: int = MAX_VALUES) -> dict[str, Any]:
    """The document within its caps: series past MAX_SERIES dropped (named in
    ``dropped_series``), windows merged by a whole factor until windows x series fits."""
    series: dict[str, list[Value]] = dict(doc.get("series") or {})
    dropped = list(doc.get("dropped_series") or [])
    if len(series) > MAX_SERIES:
        keep = sorted(series, key=_priority)[:MAX_SERIES]
        dropped += sorted(set(series) - set(keep))
        series = {name: series[name] for name in keep}
    windows = int(doc.get("windows") or 0)
    factor = 1
    if series and windows * len(series) > max_values:
        factor = math.ceil(windows * len(series) / max_values)
    if factor > 1:
        series = {n: downsample(v, factor, merge_kind(n)) for n, v in series.items()}
        windows = math.ceil(windows / factor)
    return {
        **doc,
        "step_seconds": float(doc["step_seconds"]) * factor,
        "windows": windows,
        "series": {n: [rounded(x) for x in v] for n, v in series.items()},
        "downsampled": int(doc.get("downsampled") or 1) * factor,
        "dropped_series": dropped,
        "points": list(doc.get("points") or [])[:MAX_POINTS],
    }


def _priority(name: str) -> tuple[int, str]:
    """Client, engine and GPU series before per-core CPU ones (dropped first)."""
    per_core = name.startswith("host.cpu") and name[8:9].isdigit()
    return (1 if per_core else 0, name)


def window_of(at: float, start: float, step: float) -> int:
    return math.floor((at - start) / step)


def empty(windows: int) -> list[Value]:
    return [None] * windows


def is_timeline(doc: Any) -> bool:
    return isinstance(doc, Mapping) and doc.get("timeline") == VERSION
