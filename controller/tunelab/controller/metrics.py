"""The controller's /metrics: queue and host state from the store at scrape time, dispatch and
scheduling latency, and recent experiment results as gauges Grafana can graph."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from tunelab.controller.scrape import tokens_per_joule
from tunelab.controller.states import ATTEMPT_TERMINAL, AttemptState, ExperimentState, HostState
from tunelab.controller.store import Store
from tunelab.controller.watches.alerts import WatchCollector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ControllerCollector(Collector):
    def __init__(
        self,
        store: Store,
        retention_count: int,
        retention_age: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._count = retention_count
        self._age = retention_age
        self._clock = clock

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # families depend on data; an empty describe keeps registration cheap

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily]:
        experiments = GaugeMetricFamily(
            "tunelab_controller_experiments", "Experiments by state.", labels=["state"]
        )
        counts = self._store.count_experiments_by_state()
        for state in ExperimentState:
            experiments.add_metric([state.value], counts.get(state.value, 0))
        yield experiments

        hosts = GaugeMetricFamily(
            "tunelab_controller_hosts", "Registered hosts by state.", labels=["state"]
        )
        host_counts: dict[str, int] = {}
        for host in self._store.list_hosts():
            host_counts[host.state.value] = host_counts.get(host.state.value, 0) + 1
        for hstate in HostState:
            hosts.add_metric([hstate.value], host_counts.get(hstate.value, 0))
        yield hosts

        attempt_counts = self._store.count_attempts_by_state()
        live = GaugeMetricFamily(
            "tunelab_controller_attempts_live",
            "Attempts not yet finished, by state.",
            labels=["state"],
        )
        ended = CounterMetricFamily(
            "tunelab_controller_attempts", "Finished attempts by outcome.", labels=["outcome"]
        )
        for astate in AttemptState:
            target = ended if astate in ATTEMPT_TERMINAL else live
            target.add_metric([astate.value], attempt_counts.get(astate.value, 0))
        yield live
        yield ended
        yield self._live_attempts()
        yield from self._results()

    def _live_attempts(self) -> InfoMetricFamily:
        """``run`` is the label agents put on their tunelab_bench_* series (the attempt id), so a
        dashboard can name the experiment a live run belongs to."""
        info = InfoMetricFamily(
            "tunelab_controller_attempt",
            "Attempts not yet finished: the agents' run label, experiment name and id, host.",
            labels=["run", "experiment", "id", "host"],
        )
        live = self._store.live_attempts()
        experiments = self._store.get_experiments([a.experiment_id for a in live])
        for attempt in live:
            experiment = experiments.get(attempt.experiment_id)
            name = experiment.name if experiment else ""
            info.add_metric([attempt.id, name, attempt.experiment_id, attempt.host], {})
        return info

    def _results(self) -> Iterator[GaugeMetricFamily]:
        labels = ["experiment", "id", "host", "concurrency"]
        throughput = GaugeMetricFamily(
            "tunelab_experiment_output_tokens_per_second",
            "Output token throughput of a finished experiment, per sweep point.",
            labels=labels,
        )
        requests = GaugeMetricFamily(
            "tunelab_experiment_requests_per_second",
            "Request throughput of a finished experiment, per sweep point.",
            labels=labels,
        )
        ttft = GaugeMetricFamily(
            "tunelab_experiment_ttft_median_seconds",
            "Median time to first token, per sweep point.",
            labels=labels,
        )
        tpot = GaugeMetricFamily(
            "tunelab_experiment_tpot_median_seconds",
            "Median time per output token, per sweep point.",
            labels=labels,
        )
        power = GaugeMetricFamily(
            "tunelab_experiment_gpu_power_watts",
            "Mean GPU power (sum over its GPUs) during the experiment.",
            labels=labels[:3],
        )
        per_joule = GaugeMetricFamily(
            "tunelab_experiment_output_tokens_per_joule",
            "Output tokens per joule of GPU energy while benchmarking.",
            labels=labels[:3],
        )
        finished = GaugeMetricFamily(
            "tunelab_experiment_finished_timestamp_seconds",
            "When the experiment's result was recorded.",
            labels=labels[:3],
        )
        since = self._clock() - self._age
        for experiment, attempt in self._store.recent_results(self._count, since):
            base = [experiment.name, experiment.id, attempt.host]
            for point in (attempt.result or {}).get("points", []):
                key = [*base, str(point.get("concurrency") or point.get("request_rate") or 0)]
                _add(throughput, key, point.get("output_throughput"))
                _add(requests, key, point.get("request_throughput"))
                _add(ttft, key, _ms(point.get("median_ttft_ms")))
                _add(tpot, key, _ms(point.get("median_tpot_ms")))
            summary = attempt.gpu_summary or {}
            _add(power, base, summary.get("mean_power_watts_total"))
            _add(
                per_joule,
                base,
                summary.get("tokens_per_joule") or tokens_per_joule(attempt.result, summary),
            )
            _add(finished, base, attempt.finished_at)
        yield from (throughput, requests, ttft, tpot, power, per_joule, finished)


def _ms(value: object) -> float | None:
    return float(value) / 1000.0 if isinstance(value, int | float) else None


def _add(family: GaugeMetricFamily, labels: list[str], value: object) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        family.add_metric(labels, float(value))


class ControllerMetrics:
    """The registry the controller serves, with its latency histograms."""

    def __init__(self, store: Store, retention_count: int, retention_age: float) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.dispatch_latency = Histogram(
            "tunelab_controller_dispatch_latency_seconds",
            "From committing an attempt to the agent accepting StartRun.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.scheduling_pass = Histogram(
            "tunelab_controller_scheduling_pass_seconds",
            "Duration of one scheduling pass over the queue.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.agent_errors = Counter(
            "tunelab_controller_agent_errors",
            "Failed controller-to-agent calls, by host and gRPC status.",
            ["host", "code"],
            registry=self.registry,
        )
        self.registry.register(ControllerCollector(store, retention_count, retention_age))
        self.registry.register(WatchCollector(store))

    def count_agent_error(self, host: str, code: str) -> None:
        self.agent_errors.labels(host, code).inc()
