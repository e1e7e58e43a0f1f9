"""AgentMetrics as assembled for the agent: every family described, none created twice."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, generate_latest

from tests.unit.metrics import roots
from tunelab.agent.gpu import SnapshotBackend
from tunelab.agent.metrics.app import AgentMetrics, MetricsSettings

SNAPSHOT = roots.FIXTURES / "nvml" / "h200-busy-full.json"


def test_every_collected_family_is_described_and_nothing_has_created_series(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    metrics = AgentMetrics(
        MetricsSettings(sysfs_root=roots.h200_vm(tmp_path)),
        gpu=SnapshotBackend.load(SNAPSHOT),
        list_servers=lambda include_finished: [],
        registry=registry,
        last_audit=lambda: {"checks": [{"id": "cpu.governor", "status": "WARN"}]},
        version="0.1.0",
        instance_id="i-1",
        started_at=1.0,
    )
    metrics.sampler.tick()  # one synchronous cycle instead of the thread
    Counter("tunelab_bench_requests", "Requests.", registry=registry).inc()
    collectors = list(registry._collector_to_names)  # registered by AgentMetrics, and ours
    assert len(collectors) == 7
    names = set()
    for collector in collectors:
        described = {m.name for m in collector.describe()}  # type: ignore[attr-defined]
        collected = {m.name for m in collector.collect()}
        assert collected <= described, collector
        names |= collected
    assert {
        "tunelab_gpu_power_watts",
        "tunelab_host_load1",
        "tunelab_agent",
    } <= names  # info: no _info
    text = generate_latest(registry).decode()
    assert "_created" not in text
    assert "tunelab_bench_requests_total 1.0" in text
    assert 'tunelab_audit_check_status{check="cpu.governor",status="WARN"} 1.0' in text
    assert metrics.port is None  # no listen address: sampling only, no HTTP
