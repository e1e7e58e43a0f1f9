"""Conversions between protobuf messages and the agent's domain objects (the only place that
knows both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunelab.v1 import audit_pb2, server_pb2

from agent.servers.record import ServerRecord
from agent.servers.spec import (
    DEFAULT_READY_PATH,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STOP_GRACE,
    ServerSpec,
)
from agent.servers.states import ServerState

STATE_TO_PB = {
    state: server_pb2.ServerState.Value(f"SERVER_STATE_{state.value}") for state in ServerState
}
PB_TO_STATE = {v: k for k, v in STATE_TO_PB.items()}

CHECK_STATUS_TO_PB = {
    name: audit_pb2.CheckStatus.Value(f"CHECK_STATUS_{name}")
    for name in ("PASS", "WARN", "FAIL", "SKIP", "ERROR")
}


def spec_from_pb(pb: server_pb2.ServerSpec) -> ServerSpec:
    """Proto → domain spec; defaults applied here, validation left to ServerSpec.validated()."""
    return ServerSpec(
        argv=tuple(pb.argv),
        port=pb.port,
        name=pb.name,
        env=dict(pb.env),
        cwd=pb.cwd,
        ready_path=pb.ready_path or DEFAULT_READY_PATH,
        ready_model=pb.ready_model,
        startup_timeout=pb.startup_timeout_seconds or DEFAULT_STARTUP_TIMEOUT,
        stop_grace=pb.stop_grace_seconds
        if pb.HasField("stop_grace_seconds")
        else DEFAULT_STOP_GRACE,
    )


def spec_to_pb(spec: ServerSpec) -> server_pb2.ServerSpec:
    return server_pb2.ServerSpec(
        name=spec.name,
        argv=list(spec.argv),
        env=dict(spec.env),
        cwd=spec.cwd,
        port=spec.port,
        ready_path=spec.ready_path,
        ready_model=spec.ready_model,
        startup_timeout_seconds=spec.startup_timeout,
        stop_grace_seconds=spec.stop_grace,
    )


def server_to_pb(
    record: ServerRecord, log_path: str = "", gpu_memory_bytes: int = 0
) -> server_pb2.Server:
    pb = server_pb2.Server(
        id=record.id,
        spec=spec_to_pb(record.spec),
        state=STATE_TO_PB[record.state],
        pid=record.pid,
        create_time=record.create_time,
        ready_seconds=record.ready_seconds,
        started_at=record.started_at,
        ready_at=record.ready_at,
        finished_at=record.finished_at,
        message=record.message,
        log_tail=record.log_tail,
        log_path=log_path,
        descendants=[
            server_pb2.ProcessRef(pid=p.pid, create_time=p.create_time)
            for p in sorted(record.descendants)
        ],
        gpu_check_skipped=record.gpu_check_skipped,
        gpu_memory_bytes=gpu_memory_bytes,
    )
    if record.exit_code is not None:
        pb.exit_code = record.exit_code
    if record.progress is not None:
        p = record.progress
        pb.progress.CopyFrom(
            server_pb2.LoadProgress(
                label=p.label,
                done=p.done,
                total=p.total,
                rate_per_second=p.rate_per_second,
                eta_seconds=p.eta_seconds,
                updated_at=p.updated_at,
            )
        )
    return pb


def audit_report_to_pb(report: Mapping[str, Any], report_json: str) -> audit_pb2.AuditReport:
    """The audit's JSON document (see README, "Audit a new host") → AuditReport."""
    checks = []
    for check in report.get("checks", []):
        remediation = check.get("remediation") or {}
        checks.append(
            audit_pb2.CheckResult(
                id=str(check["id"]),
                title=str(check.get("title", "")),
                status=CHECK_STATUS_TO_PB.get(
                    str(check.get("status")), audit_pb2.CHECK_STATUS_UNSPECIFIED
                ),
                observed=_text(check.get("observed")),
                expected=_text(check.get("expected")),
                evidence=[
                    audit_pb2.Evidence(source=str(e.get("source", "")), value=_text(e.get("value")))
                    for e in check.get("evidence", [])
                ],
                remediation=audit_pb2.Remediation(
                    command=str(remediation.get("command") or ""),
                    persistent=str(remediation.get("persistent") or ""),
                    reboot_required=bool(remediation.get("reboot_required", False)),
                ),
            )
        )
    return audit_pb2.AuditReport(
        host=str(report.get("host", "")),
        environment=str(report.get("environment", "")),
        checks=checks,
        generated_at=float(report.get("generated_at", 0.0)),
        report_json=report_json,
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)
