"""The fast renderer produces what prometheus_client's encoders produce, family for family."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from tunelab.agent.metrics.exposition import render
from tunelab.agent.metrics.families import FamilyCollector, counter, gauge, info


class Odd(FamilyCollector):
    """Families of every kind we render directly, with values that need escaping."""

    families = (
        info("tunelab_test_info", "Identity; help with \\ backslash\nand newline.", "a", "b"),
        gauge("tunelab_test_ratio", 'Help with "quotes".', "gpu", "uuid"),
        counter("tunelab_test_seconds_total", "A counter.", "reason"),
        gauge("tunelab_test_empty", "Never filled."),
    )

    def collect(self) -> Iterable[Metric]:
        out = self.samples()
        out.add("tunelab_test_info", ['quote " here', "back\\slash\nnewline"], 1)
        out.add("tunelab_test_ratio", ["0", "GPU-1"], 0.25)
        out.add("tunelab_test_ratio", ["1", "GPU-2"], float("nan"))
        out.add("tunelab_test_seconds_total", ["sw_power_cap"], 4.942882688)
        out.add("tunelab_test_seconds_total", ["hw_slowdown"], float("inf"))
        return out.families()


class Stamped:
    """A family with a timestamp: must go through the library encoder."""

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("other_stamped", "Has a timestamp.", labels=["x"])
        family.add_metric(["1"], 2.0, timestamp=1795972790.5)
        return [family]


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(Odd())
    registry.register(Stamped())
    # what other parts of the agent register: client_python's own metric types
    Counter("bench_requests", "Requests sent.", ["outcome"], registry=registry).labels("ok").inc(3)
    Gauge("bench_concurrency", "In flight.", registry=registry).set(8)
    Histogram("bench_ttft_seconds", "TTFT.", buckets=(0.01, 0.1, 1), registry=registry).observe(
        0.05
    )
    Summary("bench_itl_seconds", "ITL.", registry=registry).observe(0.012)
    return registry


def same(a: Iterable[Metric], b: Iterable[Metric]) -> None:
    left, right = list(a), list(b)
    assert [m.name for m in left] == [m.name for m in right]
    for x, y in zip(left, right, strict=True):
        assert (x.name, x.documentation, x.type) == (y.name, y.documentation, y.type)
        assert len(x.samples) == len(y.samples)
        for s, t in zip(x.samples, y.samples, strict=True):
            assert (s.name, s.labels, s.timestamp) == (t.name, t.labels, t.timestamp)
            assert s.value == t.value or (s.value != s.value and t.value != t.value)  # NaN


def test_text_matches_the_library_encoder(registry: CollectorRegistry) -> None:
    ours = render(registry).decode()
    same(parse_text(ours), parse_text(generate_latest(registry).decode()))
    assert "# TYPE tunelab_test_info gauge\n" in ours
    assert "# TYPE tunelab_test_seconds_total counter\n" in ours


def test_openmetrics_matches_the_library_encoder(registry: CollectorRegistry) -> None:
    ours = render(registry, openmetrics=True).decode()
    assert ours.endswith("# EOF\n") and ours.count("# EOF") == 1
    same(parse_openmetrics(ours), parse_openmetrics(openmetrics_latest(registry).decode()))
    assert "# TYPE tunelab_test info\n" in ours
    assert "# TYPE tunelab_test_seconds counter\n" in ours


def test_a_restricted_registry_renders_only_what_was_asked(registry: CollectorRegistry) -> None:
    text = render(registry.restricted_registry(["tunelab_test_ratio"])).decode()
    assert {f.name for f in parse_text(text)} == {"tunelab_test_ratio"}
