"""Declaring metric families once and filling them at scrape time.

Each collector lists its families as :class:`Family` (exposed name, type, help, labels) and
derives ``describe()`` from that list, so registering a collector never runs ``collect()`` and a
``name[]``-filtered scrape only calls the collectors it needs. ``collect()`` fills a fresh set of
families (never shared between scrapes) and returns only those that received a sample: a field
nobody could read is an absent series, not a zero. Counters carry no ``_created`` sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

Kind = Literal["gauge", "counter", "info"]


@dataclass(frozen=True)
class Family:
    """One metric family as exposed: ``name`` includes ``_total`` / ``_info`` where they apply."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()

    def new(self) -> Metric:
        labels = list(self.labels)
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.help, labels=labels)
        if self.kind == "info":
            return InfoMetricFamily(self.name.removesuffix("_info"), self.help, labels=labels)
        return GaugeMetricFamily(self.name, self.help, labels=labels)


def gauge(name: str, help: str, *labels: str) -> Family:
    return Family(name, "gauge", help, labels)


def counter(name: str, help: str, *labels: str) -> Family:
    if not name.endswith("_total"):
        raise ValueError(f"counter {name} must end in _total")
    return Family(name, "counter", help, labels)


def info(name: str, help: str, *labels: str) -> Family:
    if not name.endswith("_info"):
        raise ValueError(f"info metric {name} must end in _info")
    return Family(name, "info", help, labels)


class Samples:
    """A fresh set of families for one scrape, filled by name."""

    def __init__(self, families: Iterable[Family]) -> None:
        self._specs = {f.name: f for f in families}
        self._metrics: dict[str, Metric] = {}

    def add(self, name: str, labels: Sequence[str], value: float | int | bool | None) -> None:
        """Add one sample; ``None`` (unsupported, unknown) adds nothing."""
        if value is None:
            return
        metric = self._metrics.get(name)
        if metric is None:
            metric = self._metrics[name] = self._specs[name].new()
        if self._specs[name].kind == "info":
            metric.add_metric(list(labels), {})  # type: ignore[attr-defined]
        else:
            metric.add_metric(list(labels), float(value))  # type: ignore[attr-defined]

    def families(self) -> list[Metric]:
        return [self._metrics[name] for name in self._specs if name in self._metrics]


class FamilyCollector(Collector):
    """Base for collectors with a declared family list."""

    families: tuple[Family, ...] = ()

    def describe(self) -> list[Metric]:
        return [family.new() for family in self.families]

    def samples(self) -> Samples:
        return Samples(self.families)
