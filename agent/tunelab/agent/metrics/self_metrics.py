"""The agent's own metrics: identity, whether GPU metrics are on, sampler cost and freshness,
and failed scrapes.

``tunelab_agent_sample_age_seconds`` is the honest freshness signal: cached values are only as
new as the last successful cycle of their source, and it grows when a source keeps failing.
``tunelab_agent_sampler_cpu_seconds_total`` is the sampler thread's own CPU time, the figure
the "sampler under 1 % of one core" claim is checked against.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from tunelab.agent.metrics.families import FamilyCollector, counter, gauge, info
from tunelab.agent.metrics.sampler import Sampler
from tunelab.common.httpserve import ServerStats


class ScrapeErrors:
    """Counts scrapes that failed with a server error, per endpoint (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def inc(self, endpoint: str) -> None:
        with self._lock:
            self._counts[endpoint] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class AgentCollector(FamilyCollector):
    families = (
        info("tunelab_agent_info", "This agent process.", "version", "instance_id"),
        gauge("tunelab_agent_start_time_seconds", "When this agent process started (unix time)."),
        gauge(
            "tunelab_agent_gpu_metrics_enabled", "1 when NVML answers; 0 on a host without GPUs."
        ),
        gauge(
            "tunelab_agent_sampler_duration_seconds",
            "Duration of the last sampler cycle, per source and cadence.",
            "source",
            "cadence",
        ),
        gauge(
            "tunelab_agent_sample_age_seconds",
            "Seconds since the source last completed a cycle without error.",
            "source",
            "cadence",
        ),
        counter(
            "tunelab_agent_sampler_errors_total",
            "Sampler cycles that failed, per source and cadence.",
            "source",
            "cadence",
        ),
        counter("tunelab_agent_sampler_cpu_seconds_total", "CPU time used by the sampler thread."),
        counter(
            "tunelab_agent_scrape_errors_total", "Scrapes answered with a server error.", "endpoint"
        ),
        gauge("tunelab_agent_http_connections", "Open connections to the metrics endpoint."),
        counter(
            "tunelab_agent_http_rejected_total",
            "Connections answered 503: over the endpoint's connection cap.",
        ),
        counter(
            "tunelab_agent_http_timed_out_total",
            "Connections closed idle, or with a request head that never completed.",
        ),
    )

    def __init__(
        self,
        *,
        version: str,
        instance_id: str,
        started_at: float,
        gpu_enabled: bool,
        sampler: Sampler,
        scrape_errors: ScrapeErrors,
        http_stats: Callable[[], ServerStats | None] = lambda: None,
    ) -> None:
        self._identity = [version, instance_id]
        self._started_at = started_at
        self._gpu_enabled = gpu_enabled
        self._sampler = sampler
        self._scrape_errors = scrape_errors
        self._http_stats = http_stats

    def collect(self) -> Iterable[Metric]:
        out = self.samples()
        out.add("tunelab_agent_info", self._identity, 1)
        out.add("tunelab_agent_start_time_seconds", [], self._started_at)
        out.add("tunelab_agent_gpu_metrics_enabled", [], self._gpu_enabled)
        for (source, cadence), stats in sorted(self._sampler.stats().items()):
            labels = [source, cadence.value]
            out.add("tunelab_agent_sampler_duration_seconds", labels, stats.duration_seconds)
            out.add("tunelab_agent_sample_age_seconds", labels, self._sampler.age(source, cadence))
            out.add("tunelab_agent_sampler_errors_total", labels, stats.errors)
        out.add("tunelab_agent_sampler_cpu_seconds_total", [], self._sampler.cpu_seconds)
        for endpoint in ("/metrics", "/metrics/engines"):
            out.add(
                "tunelab_agent_scrape_errors_total",
                [endpoint],
                self._scrape_errors.counts().get(endpoint, 0),
            )
        http = self._http_stats()
        if http is not None:
            out.add("tunelab_agent_http_connections", [], http.open)
            out.add("tunelab_agent_http_rejected_total", [], http.rejected)
            out.add("tunelab_agent_http_timed_out_total", [], http.timed_out)
        return out.families()
