"""Store rows ↔ controller protobuf messages (the only module that knows both).

Everything of an experiment that leaves the controller passes here, so this is where its secrets
are masked (tunelab.common.redaction): the spec, and each attempt's provenance, result, message
and failure line, by the spec's secret names, its ``redact:`` list and every secret value in it.
The store keeps the spec as given: dispatch sends the agent the real values."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tunelab.common.redaction import Redactor, spec_redactor
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


def attempt_to_pb(
    row: AttemptRow, redactor: Redactor | None = None, mlflow_run_url: str = ""
) -> controller_pb2.Attempt:
    redact = redactor or Redactor()
    result = redact.document(row.result) if row.result is not None else None
    return controller_pb2.Attempt(
        id=row.id,
        experiment_id=row.experiment_id,
        host=row.host,
        state=ATTEMPT_TO_PB[row.state],
        created_at=row.created_at,
        finished_at=row.finished_at or 0.0,
        message=redact.text(row.message),
        gpus=row.gpus,
        result_json=_dumps(result),
        gpu_summary_json=_dumps(row.gpu_summary),
        progress_json=_dumps(row.progress),
        number=row.number,
        provenance_json=_dumps(
            redact.document(row.provenance) if row.provenance is not None else None
        ),
        failure_reason=failure_reason_pb(row.failure_reason),
        failure_line=redact.text(row.failure_line),
        mlflow_run_url=mlflow_run_url,
    )


def failure_reason_pb(name: str) -> server_pb2.FailureReason.ValueType:
    """An attempt's failure reason column ("CUDA_OOM"), as the proto enum."""
    reason = name or "UNSPECIFIED"
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


def experiment_redactor(
    row: ExperimentRow, attempts: Sequence[AttemptRow], known_secrets: Iterable[str] = ()
) -> Redactor:
    """What ``tunelab show`` masks of one experiment: the spec's secrets and ``redact:`` names,
    and every secret its attempts' provenance recorded under a secret name."""
    redact = spec_redactor(row.spec, known_secrets)
    for attempt in attempts:  # a secret the agent echoed under a harmless name
        redact.learn_document(attempt.provenance)
    return redact


def redacted_pairs(
    pairs: Iterable[tuple[ExperimentRow, Sequence[AttemptRow]]], known_secrets: Iterable[str] = ()
) -> list[tuple[ExperimentRow, list[AttemptRow]]]:
    """Copies of store rows with every secret masked as ``tunelab show`` masks it, for what is
    built from rows rather than messages (``compare``: the HTML report, ``compare --json``,
    the MLflow group artifacts). The rows given are left as they are."""
    known = list(known_secrets)
    shown = []
    for row, attempts in pairs:
        redact = experiment_redactor(row, attempts, known)
        experiment = dataclasses.replace(
            row,
            spec=redact.document(row.spec),
            varied=redact.document(row.varied),
            message=redact.text(row.message),
        )
        shown.append((experiment, [_redacted_attempt(a, redact) for a in attempts]))
    return shown


def _redacted_attempt(row: AttemptRow, redact: Redactor) -> AttemptRow:
    def masked(document: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if document is None else redact.document(document)

    return dataclasses.replace(
        row,
        message=redact.text(row.message),
        result=masked(row.result),
        gpu_summary=masked(row.gpu_summary),
        progress=masked(row.progress),
        provenance=masked(row.provenance),
        failure_line=redact.text(row.failure_line),
    )


def experiment_to_pb(
    row: ExperimentRow,
    attempts: list[AttemptRow],
    known_secrets: Iterable[str] = (),
    exports: Mapping[str, str] | None = None,
) -> controller_pb2.Experiment:
    """``exports``: attempt id -> its MLflow run's link, where one was exported."""
    exports = exports or {}
    redact = experiment_redactor(row, attempts, known_secrets)
    return controller_pb2.Experiment(
        id=row.id,
        name=row.name,
        state=EXPERIMENT_TO_PB[row.state],
        spec_json=json.dumps(redact.document(row.spec)),  # in the user's order (flags too)
        varied=row.varied,
        priority=row.priority,
        submitted_at=row.submitted_at,
        started_at=row.started_at or 0.0,
        finished_at=row.finished_at or 0.0,
        message=redact.text(row.message),
        cancel_requested=row.cancel_requested,
        attempts=[attempt_to_pb(a, redact, exports.get(a.id, "")) for a in attempts],
        group=row.group,
        repeat_index=row.repeat_index,
        host_selector=selector_text(row.selector),
        failure_reason=failure_reason_pb(attempts[-1].failure_reason if attempts else ""),
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
