"""The last host audit's results as ``tunelab_audit_check_status{check,status}``.

One series per check and possible status, 1 for the status the check had, so a dashboard can
count ``status="FAIL"`` and an alert can fire on a check that changed. The audit runs at agent
start and on RunAudit; this only renders whatever report is newest (nothing before the first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from tunelab.agent.metrics.families import FamilyCollector, gauge

STATUSES = ("PASS", "WARN", "FAIL", "SKIP", "ERROR")

LastAudit = Callable[[], Mapping[str, Any] | None]


class AuditCollector(FamilyCollector):
    families = (
        gauge(
            "tunelab_audit_check_status",
            "1 for the status each check had in the last audit (PASS, WARN, FAIL, SKIP, ERROR).",
            "check",
            "status",
        ),
        gauge("tunelab_audit_checks", "Checks in the last audit, by status.", "status"),
        gauge("tunelab_audit_last_run_timestamp_seconds", "When the last audit report was made."),
    )

    def __init__(self, last_audit: LastAudit) -> None:
        self._last_audit = last_audit

    def collect(self) -> Iterable[Metric]:
        out = self.samples()
        report = self._last_audit()
        if not report:
            return out.families()
        counts = dict.fromkeys(STATUSES, 0)
        seen: set[str] = set()
        for check in report.get("checks", ()):
            check_id = str(check.get("id", ""))
            status = str(check.get("status", "")).upper()
            if not check_id or check_id in seen:
                continue  # one series set per check id, even if a report repeats one
            seen.add(check_id)
            if status in counts:
                counts[status] += 1
            for candidate in STATUSES:
                out.add("tunelab_audit_check_status", [check_id, candidate], status == candidate)
        for status, count in counts.items():
            out.add("tunelab_audit_checks", [status], count)
        generated = report.get("generated_at")
        if isinstance(generated, (int, float)) and generated > 0:
            out.add("tunelab_audit_last_run_timestamp_seconds", [], generated)
        return out.families()
