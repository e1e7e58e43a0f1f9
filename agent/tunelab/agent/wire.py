"""Conversions between protobuf messages and the agent's domain objects (the only place that
knows both)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tunelab.agent.engines.phases import Phase
from tunelab.agent.engines.status import EngineStatus
from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.record import CommandBench, RunRecord, RunSpec
from tunelab.agent.runs.states import RunState
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.spec import (
    DEFAULT_READY_PATH,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STOP_GRACE,
    ServerSpec,
)
from tunelab.agent.servers.states import ServerState
from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.common.specbounds import SpecViolation, check_run_spec
from tunelab.v1 import audit_pb2, run_pb2, server_pb2

STATE_TO_PB = {
    state: server_pb2.ServerState.Value(f"SERVER_STATE_{state.value}") for state in ServerState
}
PB_TO_STATE = {v: k for k, v in STATE_TO_PB.items()}

PHASE_TO_PB = {
    phase: server_pb2.ServerPhase.Value(f"SERVER_PHASE_{phase.value}") for phase in Phase
}


def failure_reason_to_pb(reason: str) -> server_pb2.FailureReason.ValueType:
    """A FailureReason value (or "") → the proto enum."""
    name = f"FAILURE_REASON_{reason}" if reason else "FAILURE_REASON_UNSPECIFIED"
    return server_pb2.FailureReason.Value(name)


CHECK_STATUS_TO_PB = {
    name: audit_pb2.CheckStatus.Value(f"CHECK_STATUS_{name}")
    for name in ("PASS", "WARN", "FAIL", "SKIP", "ERROR")
}


def spec_from_pb(pb: server_pb2.ServerSpec, auto_port: bool = False) -> ServerSpec:
    """Proto → domain spec, defaults applied; validation left to ServerSpec.validated().
    ``auto_port``: a run's server, where port 0 (an older client) means the same as auto_port."""
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
        engine=pb.engine,
        auto_port=auto_port and (pb.auto_port or pb.port == 0),
        profile=pb.profile,
        redact=tuple(pb.redact),
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
        engine=spec.engine,
        auto_port=spec.auto_port,
        profile=spec.profile,
        redact=list(spec.redact),
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
                phase=PHASE_TO_PB[Phase(p.phase)]
                if p.phase
                else server_pb2.SERVER_PHASE_UNSPECIFIED,
            )
        )
    _engine_to_pb(pb, record.engine)
    return pb


def _engine_to_pb(pb: server_pb2.Server, status: EngineStatus) -> None:
    pb.engine = status.engine
    pb.phase = PHASE_TO_PB[status.phase]
    pb.phase_started_at = status.phase_started_at
    pb.phases.extend(
        server_pb2.PhaseSpan(phase=PHASE_TO_PB[s.phase], started_at=s.started_at, seconds=s.seconds)
        for s in status.phases
    )
    pb.failure_reason = failure_reason_to_pb(status.failure_reason)
    pb.failure_line = status.failure_line
    pb.probe_requests = status.http_probes
    pb.leftovers_removed.extend(status.leftovers_removed)


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


# --- runs ------------------------------------------------------------------------------------

RUN_STATE_TO_PB = {state: run_pb2.RunState.Value(f"RUN_STATE_{state.value}") for state in RunState}


def run_spec_from_pb(pb: run_pb2.RunSpec) -> RunSpec:
    """Proto → domain run spec, validating it here, once (errors name the field). The bounds
    are ``tunelab.common.specbounds``', the ones the controller checked; the server's values
    are checked through ``ServerSpec.validated()``, the benchmark's by ``BenchConfig``."""
    try:
        check_run_spec(pb, server_fields=False)
    except SpecViolation as exc:
        raise InvalidSpec(exc.field, exc.problem) from None
    server = spec_from_pb(pb.server, auto_port=True).validated() if pb.HasField("server") else None
    if server is not None and server.profile:
        raise InvalidSpec(
            "spec.server.profile", "a run profiles through benchmark.builtin.profile (profile:)"
        )
    builtin = None
    command = None
    kind = pb.benchmark.WhichOneof("kind")
    if kind == "builtin":
        try:
            config = BenchConfig.from_builtin_pb(pb.benchmark.builtin, "http://127.0.0.1:{port}")
        except BenchConfigError as exc:
            raise InvalidSpec(f"benchmark.{exc.field}", exc.problem) from exc
        builtin = config.to_dict()
    elif kind == "command":
        c = pb.benchmark.command  # its bounds were checked with the run's, above
        command = CommandBench(tuple(c.argv), c.result_file, dict(c.env))
    return RunSpec(  # its shape (server xor server_id, one benchmark) is checked on construction
        server=server,
        server_id=pb.server_id,
        builtin=builtin,
        command=command,
        max_duration=pb.max_duration_seconds,
        experiment=pb.experiment,
        keep_server=pb.keep_server,
    )


def _run_spec_to_pb(spec: RunSpec) -> run_pb2.RunSpec:
    pb = run_pb2.RunSpec(
        server_id=spec.server_id,
        max_duration_seconds=spec.max_duration,
        experiment=spec.experiment,
        keep_server=spec.keep_server,
    )
    if spec.server is not None:
        pb.server.CopyFrom(spec_to_pb(spec.server))
    if spec.command is not None:
        pb.benchmark.command.CopyFrom(
            run_pb2.CommandBenchmark(
                argv=list(spec.command.argv),
                result_file=spec.command.result_file,
                env=spec.command.env,
            )
        )
    elif spec.builtin is not None:
        b = spec.builtin
        pb.benchmark.builtin.CopyFrom(
            run_pb2.BuiltinBenchmark(
                api=b.get("api", ""),
                model=b.get("model", ""),
                concurrency=list(b.get("concurrency", [])),
                request_rate=b.get("request_rate", 0.0),
                requests=b.get("requests", 0),
                duration_seconds=b.get("duration_seconds", 0.0),
                input_len=b.get("input_len", 0),
                output_len=b.get("output_len", 0),
                url=b.get("url", ""),
                preset=b.get("preset", ""),
                rates=list(b.get("rates", [])),
                max_concurrency=b.get("max_concurrency", 0),
                ramp=b.get("ramp", ""),
                find_axis=b.get("find_axis", ""),
                find_max=b.get("find_max", 0.0),
                find_slo=b.get("find_slo", {}),
                find_plateau=b.get("find_plateau", 0.0),
                tokenizer=b.get("tokenizer_file") or b.get("tokenizer", ""),
                timeline_step_seconds=b.get("timeline_step_s", 1.0),
            )
        )
        if not b.get("timeline_step_s", 1.0):
            pb.benchmark.builtin.timeline = False
        if b.get("dataset", "random") != "random" or b.get("dataset_path"):
            pb.benchmark.builtin.dataset.CopyFrom(
                run_pb2.DatasetSpec(
                    name=b.get("dataset", ""),
                    path=b.get("dataset_path", ""),
                    sha256=b.get("dataset_sha256", ""),
                )
            )
    return pb


def run_to_pb(record: RunRecord, server: ServerRecord | None, instance_id: str) -> run_pb2.Run:
    pb = run_pb2.Run(
        run_id=record.run_id,
        spec=_run_spec_to_pb(record.spec),
        state=RUN_STATE_TO_PB[record.state],
        server_id=record.server_id,
        events=[
            run_pb2.RunEvent(at=e.at, state=RUN_STATE_TO_PB[e.state], message=e.message)
            for e in record.events
        ],
        result_json=json.dumps(record.result, sort_keys=True) if record.result is not None else "",
        message=record.message,
        started_at=record.started_at,
        finished_at=record.finished_at,
        kill_failed=record.kill_failed,
        provenance_json=json.dumps(record.provenance, sort_keys=True) if record.provenance else "",
        agent_instance_id=instance_id,
    )
    if server is not None:
        pb.server.CopyFrom(server_to_pb(server))
        failed = record.state in (RunState.FAILED_STARTUP, RunState.FAILED_BENCHMARK)
        if failed and server.engine.failure_reason:
            pb.failure_reason = failure_reason_to_pb(server.engine.failure_reason)
            pb.failure_line = server.engine.failure_line
    p = record.progress
    if p:
        pb.progress.CopyFrom(
            run_pb2.BenchProgress(
                point_index=int(p.get("point_index", 0)),
                point_count=int(p.get("point_count", 0)),
                concurrency=int(p.get("concurrency", 0)),
                request_rate=float(p.get("request_rate", 0.0)),
                requests_done=int(p.get("requests_done", 0)),
                requests_total=int(p.get("requests_total", 0)),
                errors=int(p.get("errors", 0)),
                output_tokens_per_second=float(p.get("output_tokens_per_second", 0.0)),
                elapsed_seconds=float(p.get("elapsed_seconds", 0.0)),
            )
        )
    return pb
