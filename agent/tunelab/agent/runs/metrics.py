"""Live benchmark counters on the agent's /metrics, so Grafana draws throughput while a run goes:
``tunelab_bench_output_tokens_total{run}`` and ``tunelab_bench_requests_total{run,outcome}``.

They are read at scrape time from the runs' latest progress (the bench process writes it twice a
second); the ``run`` label is the experiment name (or run id), bounded to the most recent runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

MAX_RUNS = 50


class BenchMetricsCollector(Collector):
    def __init__(self, progress: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self._progress = progress

    def describe(self) -> list[CounterMetricFamily]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        tokens = CounterMetricFamily(
            "tunelab_bench_output_tokens",
            "Output tokens streamed by the built-in load generator in this run (warm-up included).",
            labels=["run"],
        )
        requests = CounterMetricFamily(
            "tunelab_bench_requests",
            "Requests finished by the load generator, by outcome.",
            labels=["run", "outcome"],
        )
        rate = GaugeMetricFamily(
            "tunelab_bench_output_tokens_per_second",
            "Measured output tokens per second of the current sweep point.",
            labels=["run"],
        )
        concurrency = GaugeMetricFamily(
            "tunelab_bench_concurrency",
            "Concurrency of the current sweep point (0 = open loop).",
            labels=["run"],
        )
        for run, progress in list(self._progress().items())[-MAX_RUNS:]:
            tokens.add_metric([run], float(progress.get("output_tokens_total", 0)))
            for outcome, count in sorted((progress.get("requests_by_outcome") or {}).items()):
                requests.add_metric([run, outcome], float(count))
            rate.add_metric([run], float(progress.get("output_tokens_per_second", 0.0)))
            concurrency.add_metric([run], float(progress.get("concurrency", 0)))
        yield from (tokens, requests, rate, concurrency)
