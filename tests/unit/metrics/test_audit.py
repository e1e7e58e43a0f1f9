"""The last audit report as tunelab_audit_check_status{check,status}."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from tunelab.agent.metrics.audit import STATUSES, AuditCollector

REPORT: dict[str, Any] = {
    "host": "gpu-node-1",
    "environment": "vm",
    "generated_at": 1795972790.5,
    "checks": [
        {"id": "cpu.governor", "status": "FAIL", "observed": "powersave on 16 CPUs"},
        {"id": "mem.swap", "status": "PASS"},
        {"id": "gpu.persistence", "status": "pass"},
        {"id": "cpu.cstates", "status": "SKIP", "observed": "cpuidle driver none"},
        {"id": "dev.majors", "status": "ERROR"},
        {"id": "mem.thp", "status": "WARN"},
        {"id": "mem.thp", "status": "FAIL"},  # a repeated id keeps its first result
        {"id": "pcie.mrrs", "status": "SOMETHING_NEW"},
    ],
}


def registry_for(report: Mapping[str, Any] | None) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(AuditCollector(lambda: report))
    return registry


def status(registry: CollectorRegistry, check: str) -> dict[str, float | None]:
    return {
        s: registry.get_sample_value("tunelab_audit_check_status", {"check": check, "status": s})
        for s in STATUSES
    }


def test_each_check_has_one_series_per_status_with_1_for_its_status() -> None:
    registry = registry_for(REPORT)
    assert status(registry, "cpu.governor") == {
        "PASS": 0,
        "WARN": 0,
        "FAIL": 1,
        "SKIP": 0,
        "ERROR": 0,
    }
    assert status(registry, "gpu.persistence")["PASS"] == 1
    assert status(registry, "mem.thp")["WARN"] == 1 and status(registry, "mem.thp")["FAIL"] == 0
    assert set(status(registry, "pcie.mrrs").values()) == {0}
    counts = {s: registry.get_sample_value("tunelab_audit_checks", {"status": s}) for s in STATUSES}
    assert counts == {"PASS": 2, "WARN": 1, "FAIL": 1, "SKIP": 1, "ERROR": 1}
    assert registry.get_sample_value("tunelab_audit_last_run_timestamp_seconds") == 1795972790.5


def test_no_report_yet_exports_nothing() -> None:
    assert list(registry_for(None).collect()) == []


def test_the_newest_report_is_read_at_every_scrape() -> None:
    reports: list[Mapping[str, Any]] = [REPORT]
    registry = CollectorRegistry()
    registry.register(AuditCollector(lambda: reports[-1]))
    assert status(registry, "cpu.governor")["FAIL"] == 1
    reports.append({"checks": [{"id": "cpu.governor", "status": "PASS"}]})
    assert status(registry, "cpu.governor")["PASS"] == 1
    assert status(registry, "mem.swap")["PASS"] is None
