"""/metrics bodies rendered once per sampler cycle; the live energy lines fresh per scrape."""

from __future__ import annotations

import gzip
import zlib

from prometheus_client import CollectorRegistry, Gauge

from tunelab.agent.metrics.cache import ExpositionCache
from tunelab.agent.metrics.energy import EnergyCollector, EnergyTracker
from tunelab.agent.metrics.exposition import render


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup() -> tuple[ExpositionCache, Gauge, EnergyTracker, Clock, list[int]]:
    clock = Clock()
    registry = CollectorRegistry()
    gauge = Gauge("tunelab_test_value", "A value.", registry=registry)
    tracker = EnergyTracker(clock=clock)
    tracker.update(0, "GPU-a", power=500.0, counter=0.0, at=0.0)
    tracker.update(0, "GPU-a", power=500.0, counter=500.0, at=1.0)
    live = EnergyCollector(tracker)
    registry.register(live)
    generation = [0]
    cache = ExpositionCache(registry, live, lambda: generation[0], max_age=1.0, clock=clock)
    return cache, gauge, tracker, clock, generation


def test_one_render_per_cycle_and_per_format() -> None:
    cache, gauge, _, _, generation = setup()
    gauge.set(1)
    for _ in range(50):
        assert b"tunelab_test_value 1.0" in cache.body(openmetrics=False, gzipped=False)
        cache.body(openmetrics=False, gzipped=True)
    assert cache.renders == 1
    gauge.set(2)  # changed mid-cycle: the next cycle shows it
    assert b"tunelab_test_value 1.0" in cache.body(openmetrics=False, gzipped=False)
    generation[0] += 1
    assert b"tunelab_test_value 2.0" in cache.body(openmetrics=False, gzipped=False)
    cache.body(openmetrics=True, gzipped=False)
    assert cache.renders == 3


def test_a_stalled_sampler_still_rerenders_after_max_age() -> None:
    cache, gauge, _, clock, _ = setup()
    gauge.set(1)
    cache.body(openmetrics=False, gzipped=False)
    gauge.set(3)
    clock.now += 1.5  # no new tick, but sample ages must keep growing on /metrics
    assert b"tunelab_test_value 3.0" in cache.body(openmetrics=False, gzipped=False)
    assert cache.renders == 2


def test_energy_lines_are_fresh_per_scrape_and_gzip_is_one_valid_stream() -> None:
    cache, _, _, clock, _ = setup()
    clock.now = 1.0
    first = cache.body(openmetrics=False, gzipped=True)
    clock.now = 1.5
    second = cache.body(openmetrics=False, gzipped=True)
    assert b'tunelab_gpu_energy_joules_total{gpu="0",uuid="GPU-a"} 500.0' in gzip.decompress(first)
    assert b'tunelab_gpu_energy_joules_total{gpu="0",uuid="GPU-a"} 750.0' in gzip.decompress(second)
    # one gzip member (what every client reads), not concatenated members
    decoder = zlib.decompressobj(31)
    decoder.decompress(second)
    assert decoder.eof and decoder.unused_data == b""
    assert cache.renders == 1


def test_each_format_equals_an_uncached_render_of_the_same_registry() -> None:
    cache, gauge, _, clock, _ = setup()
    gauge.set(7)
    clock.now = 1.0
    registry = cache._registry
    for openmetrics in (False, True):
        body = cache.body(openmetrics=openmetrics, gzipped=False)
        direct = render(registry, openmetrics)
        assert sorted(body.splitlines()) == sorted(direct.splitlines())
        assert gzip.decompress(cache.body(openmetrics=openmetrics, gzipped=True)) == body
    assert cache.body(openmetrics=True, gzipped=False).endswith(b"# EOF\n")
    assert cache.body(openmetrics=True, gzipped=False).count(b"# EOF") == 1
