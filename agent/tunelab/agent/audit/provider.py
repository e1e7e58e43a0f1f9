"""The audit as the daemon serves it: RunAudit requests, the start-up audit, the last report.

The metrics endpoint exports the last report (``tunelab_audit_check_status``), so every run,
whether asked for over RPC or made at start, replaces it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from tunelab.agent.audit.context import NO_SNAPSHOT_FOR_CAPTURE, AuditContext, AuditOptions
from tunelab.agent.audit.runner import UnknownCheck, parse_only, run_audit
from tunelab.agent.errors import InvalidSpec
from tunelab.agent.gpu import GpuBackend
from tunelab.agent.system import System

log = structlog.get_logger(__name__)


class AuditProvider:
    """``provider(only) -> (report, report_json)``; unknown ids raise InvalidSpec("only")."""

    def __init__(
        self,
        system: System,
        gpu: GpuBackend | None,
        gpu_skip_reason: str = "",
        options: AuditOptions | None = None,
        on_report: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self._system = system
        self._gpu = gpu
        self._gpu_skip_reason = gpu_skip_reason
        self._options = options or AuditOptions()
        self._on_report = on_report
        self._lock = threading.Lock()  # one audit at a time: they read the same files
        self._last: Mapping[str, Any] | None = None

    def __call__(self, only: list[str]) -> tuple[Mapping[str, Any], str]:
        try:
            ids = parse_only(only)
        except UnknownCheck as exc:
            raise InvalidSpec("only", str(exc)) from None
        with self._lock:
            ctx = AuditContext(self._system, self._gpu, self._gpu_skip_reason, self._options)
            report = run_audit(ctx, ids)
            self._last = merge(self._last, report) if ids else report
            last = self._last
        if self._on_report is not None:
            self._on_report(last)
        failed = [c["id"] for c in report["checks"] if c["status"] == "FAIL"]
        log.info("audit_done", checks=len(report["checks"]), failed=failed)
        return report, json.dumps(report, indent=2)


def merge(last: Mapping[str, Any] | None, partial: Mapping[str, Any]) -> Mapping[str, Any]:
    """A partial (``only``) run refreshes its checks inside the last full report."""
    if last is None:
        return partial
    fresh = {c["id"]: c for c in partial["checks"]}
    checks = [fresh.pop(c["id"], c) for c in last["checks"]] + list(fresh.values())
    return {**last, **{k: v for k, v in partial.items() if k != "checks"}, "checks": checks}


def gpu_for_audit(
    system: System, gpu: GpuBackend, snapshot_given: bool
) -> tuple[GpuBackend | None, str]:
    """A captured root is judged with NVML only when NVML is a snapshot too."""
    if system.is_live or snapshot_given:
        return gpu, ""
    return None, NO_SNAPSHOT_FOR_CAPTURE
