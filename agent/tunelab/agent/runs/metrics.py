"""Live benchmark counters on the agent's /metrics, so Grafana draws throughput while a run goes:
``tunelab_bench_output_tokens_total{run}`` and ``tunelab_bench_requests_total{run,outcome}``.

They are read at scrape time from the runs' latest progress (the bench process writes it twice a
second); the ``run`` label is the experiment name (or run id), bounded to the most recent runs.
A finished run's series go away: its gauges (rate, concurrency of the current point) at once, its
counters after FINISHED_LINGER seconds, so a scrape or two still reads their final values and a
dashboard shows only what runs (a finished run's counters never drop mid-run, only vanish).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tunelab.agent.runs.record import RunRecord

MAX_RUNS = 50
FINISHED_LINGER = 30.0


def exported_progress(
    runs: Iterable[RunRecord], now: float, linger: float = FINISHED_LINGER
) -> dict[str, dict[str, Any]]:
    """Progress to export, oldest first, by experiment label (or run id): runs still going, and
    runs finished within ``linger`` seconds (marked ``finished``: counters only)."""
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(runs, key=lambda r: r.started_at):
        if not r.progress:
            continue
        finished = r.state.is_terminal()
        if finished and now - (r.finished_at or r.started_at) > linger:
            continue
        out[r.spec.experiment or r.run_id] = {**r.progress, "finished": finished}
    return out


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
            if progress.get("finished"):
                continue  # no current sweep point: only the counters' final values linger
            rate.add_metric([run], float(progress.get("output_tokens_per_second", 0.0)))
            concurrency.add_metric([run], float(progress.get("concurrency", 0)))
        yield from (tokens, requests, rate, concurrency)
