"""The agent's own metrics: identity, GPU on/off, sampler cost and freshness, scrape errors."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tunelab.agent.gpu import Cadence
from tunelab.agent.metrics.sampler import Sampler
from tunelab.agent.metrics.self_metrics import AgentCollector, ScrapeErrors


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


class Host:
    name = "host"
    cadences = frozenset({Cadence.FAST, Cadence.SLOW})

    def __init__(self) -> None:
        self.fail = False

    def sample(self, cadence: Cadence) -> None:
        if self.fail and cadence is Cadence.FAST:
            raise OSError("/proc/stat vanished")


def test_agent_metrics_report_sampler_freshness_errors_and_identity() -> None:
    clock = Clock()
    host = Host()
    sampler = Sampler([host], 1.0, 15.0, clock=clock)
    errors = ScrapeErrors()
    registry = CollectorRegistry()
    registry.register(
        AgentCollector(
            version="0.1.0",
            instance_id="abc",
            started_at=1795972790.0,
            gpu_enabled=False,
            sampler=sampler,
            scrape_errors=errors,
        )
    )
    sampler.tick()
    host.fail = True
    for _ in range(3):
        clock.now += 1.0
        sampler.tick()
    errors.inc("/metrics/engines")
    fast = {"source": "host", "cadence": "fast"}
    slow = {"source": "host", "cadence": "slow"}
    assert (
        registry.get_sample_value("tunelab_agent_info", {"version": "0.1.0", "instance_id": "abc"})
        == 1
    )
    assert registry.get_sample_value("tunelab_agent_gpu_metrics_enabled") == 0
    assert registry.get_sample_value("tunelab_agent_start_time_seconds") == 1795972790.0
    assert registry.get_sample_value("tunelab_agent_sample_age_seconds", fast) == 3.0
    assert registry.get_sample_value("tunelab_agent_sample_age_seconds", slow) == 3.0
    assert registry.get_sample_value("tunelab_agent_sampler_errors_total", fast) == 3
    assert registry.get_sample_value("tunelab_agent_sampler_errors_total", slow) == 0
    assert registry.get_sample_value("tunelab_agent_sampler_duration_seconds", fast) == 0.0
    assert (
        registry.get_sample_value("tunelab_agent_sampler_cpu_seconds_total") == sampler.cpu_seconds
    )
    assert (
        registry.get_sample_value("tunelab_agent_scrape_errors_total", {"endpoint": "/metrics"})
        == 0
    )
    engines = {"endpoint": "/metrics/engines"}
    assert registry.get_sample_value("tunelab_agent_scrape_errors_total", engines) == 1
