"""``run_pb2.Run`` → :class:`RunReport`: the one place a run's protobuf becomes the plain
report dispatch consumes (used by agent_client.py and slurm/driver.py, the two edges a run
report comes in by)."""

from __future__ import annotations

from typing import Any

from tunelab.controller.runreport import RunReport
from tunelab.controller.states import AttemptState
from tunelab.v1 import run_pb2, server_pb2

A = AttemptState
RUN_TO_ATTEMPT = {
    run_pb2.RUN_STATE_PENDING: A.STARTING,
    run_pb2.RUN_STATE_STARTING: A.STARTING,
    run_pb2.RUN_STATE_READY: A.READY,
    run_pb2.RUN_STATE_BENCHMARKING: A.BENCHMARKING,
    run_pb2.RUN_STATE_SUCCEEDED: A.SUCCEEDED,
    run_pb2.RUN_STATE_FAILED_STARTUP: A.FAILED_STARTUP,
    run_pb2.RUN_STATE_FAILED_BENCHMARK: A.FAILED_BENCHMARK,
    run_pb2.RUN_STATE_CANCELLED: A.CANCELLED,
    run_pb2.RUN_STATE_TIMED_OUT: A.TIMED_OUT,
}


def run_report(run: run_pb2.Run) -> RunReport:
    return RunReport(
        run_id=run.run_id,
        target=RUN_TO_ATTEMPT.get(run.state),
        message=run.message,
        kill_failed=run.kill_failed,
        agent_instance_id=run.agent_instance_id,
        progress=_progress(run),
        provenance_json=run.provenance_json,
        result_json=run.result_json,
        failure_reason=failure_name(run),
        failure_line=run.failure_line,
        server_detail=server_detail(run.server) if run.HasField("server") else "",
    )


def failure_name(run: run_pb2.Run) -> str:
    """The run's failure reason without the enum's prefix ("CUDA_OOM"), or ""."""
    if not run.failure_reason:
        return ""
    return server_pb2.FailureReason.Name(run.failure_reason).removeprefix("FAILURE_REASON_")


def server_detail(server: server_pb2.Server) -> str:
    """One line for a server that is starting: ``server LOADING, loading weights: Loading
    safetensors checkpoint shards 12/83 (ETA 4 s)``; ``""`` once it is past starting."""
    if server.state not in (server_pb2.SERVER_STATE_STARTING, server_pb2.SERVER_STATE_LOADING):
        return ""
    state = server_pb2.ServerState.Name(server.state).removeprefix("SERVER_STATE_")
    line = f"server {state}"
    if server.phase:
        phase = server_pb2.ServerPhase.Name(server.phase).removeprefix("SERVER_PHASE_")
        line += f", {phase.lower().replace('_', ' ')}"
    bar = server.progress if server.HasField("progress") else None
    if bar is not None and bar.total and (bar.phase == server.phase or not server.phase):
        line += (
            f": {bar.label} {bar.done}/{bar.total}" if bar.label else f": {bar.done}/{bar.total}"
        )
        if bar.eta_seconds >= 0 and bar.done < bar.total:
            line += f" (ETA {bar.eta_seconds:.0f} s)"
    return line


def _progress(run: run_pb2.Run) -> dict[str, Any] | None:
    if not run.HasField("progress"):
        return None
    p = run.progress
    return {
        "point_index": p.point_index,
        "point_count": p.point_count,
        "concurrency": p.concurrency,
        "request_rate": p.request_rate,
        "requests_done": p.requests_done,
        "requests_total": p.requests_total,
        "errors": p.errors,
        "output_tokens_per_second": round(p.output_tokens_per_second, 3),
        "elapsed_seconds": round(p.elapsed_seconds, 3),
    }
