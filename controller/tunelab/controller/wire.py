"""Store rows ↔ controller protobuf messages (the only module that knows both)."""

from __future__ import annotations

import json
from typing import Any

from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store import AttemptRow, ExperimentRow, HostRow
from tunelab.v1 import agent_pb2, controller_pb2, server_pb2

EXPERIMENT_TO_PB = {
    s: controller_pb2.ExperimentState.Value(f"EXPERIMENT_STATE_{s.value}") for s in ExperimentState
}
PB_TO_EXPERIMENT = {v: k for k, v in EXPERIMENT_TO_PB.items()}
ATTEMPT_TO_PB = {
    s: controller_pb2.AttemptState.Value(f"ATTEMPT_STATE_{s.value}") for s in AttemptState
}
HOST_TO_PB = {s: controller_pb2.HostState.Value(f"HOST_STATE_{s.value}") for s in HostState}


def _dumps(value: object) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True)


def attempt_to_pb(row: AttemptRow) -> controller_pb2.Attempt:
    return controller_pb2.Attempt(
        id=row.id,
        experiment_id=row.experiment_id,
        host=row.host,
        state=ATTEMPT_TO_PB[row.state],
        created_at=row.created_at,
        finished_at=row.finished_at or 0.0,
        message=row.message,
        gpus=row.gpus,
        result_json=_dumps(row.result),
        gpu_summary_json=_dumps(row.gpu_summary),
        progress_json=_dumps(row.progress),
        number=row.number,
        provenance_json=_dumps(row.provenance),
        failure_reason=failure_reason_pb(row.result),
        failure_line=str((row.result or {}).get("failure_line", "")),
    )


def failure_reason_pb(result: dict[str, Any] | None) -> server_pb2.FailureReason.ValueType:
    """The failure reason dispatch kept in an attempt's result, as the proto enum."""
    reason = str((result or {}).get("failure_reason", "")) or "UNSPECIFIED"
    try:
        return server_pb2.FailureReason.Value(f"FAILURE_REASON_{reason}")
    except ValueError:  # a reason this controller does not know yet
        return server_pb2.FAILURE_REASON_UNSPECIFIED


def selector_text(host: dict[str, object]) -> str:
    parts = []
    if host.get("name"):
        parts.append(str(host["name"]))
    labels = host.get("labels") or {}
    if isinstance(labels, dict) and labels:
        parts.append(",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    if host.get("gpus"):
        parts.append(f"{host['gpus']} GPUs")
    return " ".join(parts) or "any host"


def experiment_to_pb(row: ExperimentRow, attempts: list[AttemptRow]) -> controller_pb2.Experiment:
    return controller_pb2.Experiment(
        id=row.id,
        name=row.name,
        state=EXPERIMENT_TO_PB[row.state],
        spec_json=json.dumps(row.spec),  # in the user's order (flags are passed in it)
        varied=row.varied,
        priority=row.priority,
        submitted_at=row.submitted_at,
        started_at=row.started_at or 0.0,
        finished_at=row.finished_at or 0.0,
        message=row.message,
        cancel_requested=row.cancel_requested,
        attempts=[attempt_to_pb(a) for a in attempts],
        group=row.group,
        repeat_index=row.repeat_index,
        host_selector=selector_text(row.selector),
        failure_reason=failure_reason_pb(attempts[-1].result if attempts else None),
    )


def host_to_pb(row: HostRow, current: list[str]) -> controller_pb2.Host:
    return controller_pb2.Host(
        name=row.name,
        address=row.address,
        labels=row.labels,
        state=HOST_TO_PB[row.state],
        state_reason=row.state_reason,
        gpu_count=row.gpu_count,
        gpus=[
            agent_pb2.GpuSummary(
                index=int(g.get("index", 0)),
                uuid=str(g.get("uuid", "")),
                name=str(g.get("name", "")),
                memory_total_bytes=int(g.get("memory_total_bytes", 0)),
            )
            for g in row.gpus
        ],
        last_seen=row.last_seen or 0.0,
        current_attempts=current,
        agent_instance_id=row.agent_instance_id,
        agent_version=row.agent_version,
        metrics_url=row.metrics_url,
        drain=row.drain,
    )
