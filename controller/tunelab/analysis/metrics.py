"""The one metric catalogue: every figure tunelab judges or shows, which way is better, its unit
and its label (issue 43.1).

Compare, the report, the search (objective and SLOs), watches, alerts and the MLflow export read
this table; there is no second one. A search's objective names (``ttft_p99_ms``, ``goodput``)
are aliases of the same entries as a result point's fields (``p99_ttft_ms``,
``request_goodput``), so one direction serves both spellings.

A metric may be written ``NAME@KEY``: the figure at one load point (``p99_ttft_ms@c8``,
``output_throughput@r4.0``, ``p2``). :func:`parse_metric` reads that once; everything else
takes a :class:`MetricRef` or a :class:`Metric`, never the text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class Direction(StrEnum):
    """Which way is better."""

    HIGHER = "higher"
    LOWER = "lower"


@dataclass(frozen=True)
class Metric:
    """One figure: its catalogue ``name``, the ``field`` that holds it (in a result point, or in
    the run for a run-level figure), which way is better, its unit and a short label."""

    name: str
    field: str
    direction: Direction
    unit: str
    label: str
    scope: str = "point"  # "point": one value per load point; "run": one per launch
    aliases: tuple[str, ...] = ()

    @property
    def higher_is_better(self) -> bool:
        return self.direction is Direction.HIGHER


def _latency(stat: str, what: str, label: str) -> Metric:
    """``median_ttft_ms`` / ``p99_ttft_ms``, aliased as the search spells them (``ttft_p99_ms``)."""
    name = f"{stat}_{what}_ms"
    short = "p50" if stat == "median" else stat
    return Metric(
        name, name, Direction.LOWER, "ms", f"{label} {short}", aliases=(f"{what}_{stat}_ms",)
    )


_ENTRIES = (
    Metric("output_throughput", "output_throughput", Direction.HIGHER, "tok/s", "tok/s"),
    Metric("request_throughput", "request_throughput", Direction.HIGHER, "req/s", "req/s"),
    Metric(
        "total_token_throughput", "total_token_throughput", Direction.HIGHER, "tok/s", "total tok/s"
    ),
    Metric(
        "goodput",
        "request_goodput",
        Direction.HIGHER,
        "req/s",
        "goodput",
        aliases=("request_goodput",),
    ),
    *(
        _latency(stat, what, label)
        for what, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
        for stat in ("median", "p99")
    ),
    Metric("completed", "completed", Direction.HIGHER, "requests", "completed"),
    Metric("failed", "failed", Direction.LOWER, "requests", "failed"),
    Metric("tokens_per_joule", "tokens_per_joule", Direction.HIGHER, "tok/J", "tok/J", "run"),
    Metric(
        "mean_power_watts",
        "mean_power_watts",
        Direction.LOWER,
        "W",
        "GPU power",
        "run",
        aliases=("gpu_power_watts",),
    ),
    Metric("energy_joules", "energy_joules", Direction.LOWER, "J", "energy", "run"),
)

CATALOGUE: Mapping[str, Metric] = MappingProxyType({m.name: m for m in _ENTRIES})
_BY_ANY: Mapping[str, Metric] = MappingProxyType(
    {**{a: m for m in _ENTRIES for a in m.aliases}, **CATALOGUE}
)
# the latency metrics, as SLOs are written (a limit that the value must stay at or below)
LATENCIES: tuple[Metric, ...] = tuple(m for m in _ENTRIES if m.unit == "ms")
# the metrics a comparison judges (compare's rows, the report's effects), in table order
COMPARED: tuple[Metric, ...] = tuple(
    CATALOGUE[n]
    for n in (
        "output_throughput",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "median_itl_ms",
        "p99_itl_ms",
        "tokens_per_joule",
    )
)
_REF = re.compile(r"^([a-z0-9_]+)(?:@([A-Za-z0-9.]+))?$")


class UnknownMetric(ValueError):
    """A metric name that is not in the catalogue; the message lists the names it knows."""


def names() -> tuple[str, ...]:
    """The catalogue's names, in table order (aliases not repeated)."""
    return tuple(CATALOGUE)


def _unknown(text: str) -> UnknownMetric:
    near = difflib.get_close_matches(text, list(_BY_ANY), n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return UnknownMetric(f"unknown metric {text!r}{hint}; one of: {', '.join(names())}")


def lookup(name: str) -> Metric:
    """The metric called ``name`` (a catalogue name or an alias)."""
    found = _BY_ANY.get(name)
    if found is None:
        raise _unknown(name)
    return found


def label(name: str) -> str:
    """A metric's short label; a name outside the catalogue as it is."""
    found = _BY_ANY.get(name)
    return found.label if found else name


@dataclass(frozen=True)
class MetricRef:
    """A metric as written: ``p99_ttft_ms@c8`` is p99 TTFT at the load point ``c8``."""

    metric: Metric
    point: str | None
    text: str


def parse_metric(text: str) -> MetricRef:
    """``NAME`` or ``NAME@KEY`` parsed once; :class:`UnknownMetric` names what is known."""
    match = _REF.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise UnknownMetric(
            f"expected NAME or NAME@POINT (such as p99_ttft_ms@c8), got {text!r}; "
            f"names: {', '.join(names())}"
        )
    return MetricRef(lookup(match.group(1)), match.group(2), text.strip())
