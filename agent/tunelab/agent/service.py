"""The gRPC adapter for ``tunelab.v1.Agent``: requests in, domain calls, messages out.

No lifecycle logic lives here. Domain errors become status codes in one table (``STATUS_BY_ERROR``).
"""

from __future__ import annotations

import os
import platform
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import structlog

from tunelab.agent.engines.traces import TraceNotFound, listed, read_trace
from tunelab.agent.errors import Busy, Conflict, DiskFull, InvalidSpec, NotFound, Unavailable
from tunelab.agent.gpu import GpuBackend, GpuError
from tunelab.agent.logfiles import read_log_chunks, tail_offset
from tunelab.agent.runs.flagcheck import check_engine_flags
from tunelab.agent.runs.record import RunRecord, RunSpec
from tunelab.agent.servers.profiler import ProfileOutcome, ProfileRequest, ServerProfiler
from tunelab.agent.servers.registry import ServerRegistry
from tunelab.agent.wire import (
    audit_report_to_pb,
    run_spec_from_pb,
    run_to_pb,
    server_to_pb,
    spec_from_pb,
)
from tunelab.common import __version__
from tunelab.common.rpcerrors import StatusMapper, StatusTable
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2

log = structlog.get_logger(__name__)

STATUS_BY_ERROR: StatusTable = (
    (InvalidSpec, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (Busy, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DiskFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
)
SERVICE_NAME = "tunelab.v1.Agent"
STOP_WAIT_MARGIN = 75.0  # kill timeout + GPU release wait, beyond the grace period
# StopServer waits at most this long for the server to end: a call with no deadline reports about
# 1e10 s left, which threading's wait refuses with OverflowError (issue 36.6)
STOP_WAIT_CAP = 600.0

_errors = StatusMapper(STATUS_BY_ERROR, daemon="agent")
_unary, _stream = _errors.unary, _errors.stream


class AuditProvider(Protocol):
    def __call__(self, only: list[str]) -> tuple[Mapping[str, Any], str]:
        """Run the audit; returns the report document and its JSON text."""
        ...


class RunProvider(Protocol):
    """Experiment runs (agent.runs.executor.RunExecutor); the service only adapts them."""

    def start(self, run_id: str, spec: RunSpec) -> tuple[RunRecord, bool]: ...
    def get(self, run_id: str) -> RunRecord: ...
    def runs(self, include_finished: bool) -> list[RunRecord]: ...
    def watch(self, run_id: str, cancelled: Callable[[], bool]) -> Iterator[RunRecord]: ...
    def cancel(self, run_id: str) -> RunRecord: ...
    def log_path(self, run_id: str, stream: str) -> Path: ...
    def is_finished(self, run_id: str) -> bool: ...
    def active_run_ids(self) -> list[str]: ...
    def run_dir(self, run_id: str) -> Path: ...


@dataclass
class AgentIdentity:
    instance_id: str
    started_at: float


class _Cancellation:
    """Turns a stream's cancellation into an event that interruptible waits can use."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self._event = threading.Event()
        context.add_callback(self._event.set)
        self._context = context

    def __call__(self) -> bool:
        return self._event.is_set() or not self._context.is_active()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)


class AgentService(agent_pb2_grpc.AgentServicer):
    def __init__(
        self,
        identity: AgentIdentity,
        registry: ServerRegistry,
        gpu: GpuBackend,
        audit: AuditProvider | None = None,
        runs: RunProvider | None = None,
        gpu_memory_by_server: Callable[[], Mapping[str, int]] | None = None,
        profiler: ServerProfiler | None = None,
    ) -> None:
        self._identity = identity
        self._registry = registry
        self._profiler = profiler or ServerProfiler(registry)
        self._gpu = gpu
        self._audit = audit
        self._runs = runs
        self._gpu_memory = gpu_memory_by_server or dict

    # --- info and audit ----------------------------------------------------------------------

    @_unary
    def GetInfo(
        self, request: agent_pb2.GetInfoRequest, context: grpc.ServicerContext
    ) -> agent_pb2.GetInfoResponse:
        response = agent_pb2.GetInfoResponse(
            instance_id=self._identity.instance_id,
            version=__version__,
            hostname=socket.gethostname(),
            kernel=platform.release(),
            cpu_count=_cpu_count(),
            gpu_metrics_enabled=self._gpu.available(),
            gpu_message=self._gpu.unavailable_reason(),
            servers_active=len(self._registry.servers()),
            started_at=self._identity.started_at,
        )
        for item in self._registry.quarantined.items():
            response.quarantined_state_files.add(
                path=str(item.path), reason=item.reason, kept_as=str(item.kept_as or ""), at=item.at
            )
        if self._runs is not None:
            active = self._runs.active_run_ids()
            response.runs_active = len(active)
            response.active_run_ids.extend(active)
        if self._gpu.available():
            try:
                system = self._gpu.system()
                response.driver_version = str(system.get("driver_version") or "")
                response.cuda_driver_version = str(system.get("cuda_driver_version") or "")
                for index in range(self._gpu.device_count()):
                    response.gpus.add(
                        index=index,
                        uuid=str(self._gpu.read(index, "uuid") or ""),
                        name=str(self._gpu.read(index, "name") or ""),
                        memory_total_bytes=int(self._gpu.read(index, "memory_total_bytes") or 0),  # type: ignore[arg-type]
                        pci_bus_id=str(self._gpu.read(index, "pci_bus_id") or ""),
                    )
            except GpuError as exc:
                response.gpu_message = f"GPU query failed: {exc}"
        return response

    @_unary
    def RunAudit(
        self, request: agent_pb2.RunAuditRequest, context: grpc.ServicerContext
    ) -> agent_pb2.RunAuditResponse:
        if self._audit is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this agent was built without the audit")
        assert self._audit is not None
        report, text = self._audit(list(request.only))
        return agent_pb2.RunAuditResponse(report=audit_report_to_pb(report, text))

    # --- servers -----------------------------------------------------------------------------

    def _server_pb(self, record: Any) -> Any:
        pb = server_to_pb(
            record,
            str(self._registry.log_path(record.id)),
            self._gpu_memory().get(record.id, 0),
        )
        if record.spec.profile:
            pb.profile_dir = str(self._registry.trace_dir(record.id))
            pb.profiling = self._profiler.is_profiling(record.id)
        return pb

    @_stream
    def ProfileServer(
        self, request: agent_pb2.ProfileServerRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.ProfileServerResponse]:
        settings = ProfileRequest(
            window_seconds=request.window_seconds,
            window_requests=request.window_requests,
            activities=tuple(request.activities),
            max_bytes=request.max_bytes,
            start_url=request.start_url,
            stop_url=request.stop_url,
            stop_timeout_seconds=request.stop_timeout_seconds,
        )
        for outcome in self._profiler.profile(request.id, settings, _Cancellation(context)):
            yield _profile_pb(outcome)

    @_unary
    def StartServer(
        self, request: agent_pb2.StartServerRequest, context: grpc.ServicerContext
    ) -> agent_pb2.StartServerResponse:
        spec = spec_from_pb(request.spec).validated()
        check_engine_flags(spec)
        record = self._registry.start(spec, request.id)
        return agent_pb2.StartServerResponse(server=self._server_pb(record))

    @_unary
    def GetServer(
        self, request: agent_pb2.GetServerRequest, context: grpc.ServicerContext
    ) -> agent_pb2.GetServerResponse:
        return agent_pb2.GetServerResponse(server=self._server_pb(self._registry.get(request.id)))

    @_unary
    def ListServers(
        self, request: agent_pb2.ListServersRequest, context: grpc.ServicerContext
    ) -> agent_pb2.ListServersResponse:
        records = self._registry.servers(include_finished=request.include_finished)
        return agent_pb2.ListServersResponse(servers=[self._server_pb(r) for r in records])

    @_unary
    def StopServer(
        self, request: agent_pb2.StopServerRequest, context: grpc.ServicerContext
    ) -> agent_pb2.StopServerResponse:
        grace = request.grace_seconds if request.grace_seconds > 0 else None
        remaining = context.time_remaining()
        wait = STOP_WAIT_CAP if remaining is None else min(STOP_WAIT_CAP, max(0.0, remaining - 0.5))
        record = self._registry.stop(request.id, grace, wait)
        return agent_pb2.StopServerResponse(server=self._server_pb(record))

    @_stream
    def WatchServer(
        self, request: agent_pb2.WatchServerRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.WatchServerResponse]:
        cancelled = _Cancellation(context)
        for record in self._registry.watch(request.id, cancelled):
            yield agent_pb2.WatchServerResponse(server=self._server_pb(record))

    @_stream
    def StreamLogs(
        self, request: agent_pb2.StreamLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.StreamLogsResponse]:
        target = request.WhichOneof("target")
        if target == "server_id":
            server_id = self._registry.get(request.server_id).id
            path = self._registry.log_path(server_id)

            def finished() -> bool:
                return self._registry.is_finished(server_id)

        elif target == "run_id":
            if self._runs is None:
                raise NotFound("this agent runs no experiments")
            runs = self._runs
            run_id = request.run_id
            path = runs.log_path(run_id, request.stream or "server")

            def finished() -> bool:
                return runs.is_finished(run_id)

        else:
            raise InvalidSpec("target", "set server_id or run_id")
        offset = tail_offset(path, request.tail_lines) if request.tail_lines > 0 else request.offset
        cancelled = _Cancellation(context)
        for pos, data, eof in read_log_chunks(
            path,
            offset,
            follow=request.follow,
            finished=finished,
            cancelled=cancelled,
            wait=cancelled.wait,
        ):
            yield agent_pb2.StreamLogsResponse(offset=pos, data=data, eof=eof)

    # --- runs --------------------------------------------------------------------------------

    def _require_runs(self, context: grpc.ServicerContext) -> RunProvider:
        if self._runs is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "this agent runs no experiments")
        assert self._runs is not None
        return self._runs

    def _run_pb(self, record: RunRecord) -> run_pb2.Run:
        server = None
        if record.server_id:
            try:
                server = self._registry.get(record.server_id)
            except NotFound:
                server = None
        return run_to_pb(record, server, self._identity.instance_id)

    @_unary
    def StartRun(
        self, request: agent_pb2.StartRunRequest, context: grpc.ServicerContext
    ) -> agent_pb2.StartRunResponse:
        runs = self._require_runs(context)
        record, created = runs.start(request.run_id, run_spec_from_pb(request.spec))
        return agent_pb2.StartRunResponse(run=self._run_pb(record), created=created)

    @_unary
    def GetRun(
        self, request: agent_pb2.GetRunRequest, context: grpc.ServicerContext
    ) -> agent_pb2.GetRunResponse:
        return agent_pb2.GetRunResponse(
            run=self._run_pb(self._require_runs(context).get(request.run_id))
        )

    @_unary
    def ListRuns(
        self, request: agent_pb2.ListRunsRequest, context: grpc.ServicerContext
    ) -> agent_pb2.ListRunsResponse:
        records = self._require_runs(context).runs(request.include_finished)
        return agent_pb2.ListRunsResponse(
            runs=[self._run_pb(r) for r in records], agent_instance_id=self._identity.instance_id
        )

    @_stream
    def WatchRun(
        self, request: agent_pb2.WatchRunRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.WatchRunResponse]:
        runs = self._require_runs(context)
        for record in runs.watch(request.run_id, _Cancellation(context)):
            yield agent_pb2.WatchRunResponse(run=self._run_pb(record))

    @_stream
    def FetchProfile(
        self, request: agent_pb2.FetchProfileRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.FetchProfileResponse]:
        """A kept trace by the name the run's result (or the server's profiles) lists; never a
        path from the request."""
        if bool(request.run_id) == bool(request.server_id):
            raise InvalidSpec("server_id", "set exactly one of run_id and server_id")
        if request.server_id:
            server_id = self._registry.get(request.server_id).id
            folder = self._registry.server_dir(server_id)
            allowed = self._profiler.kept_names(server_id)
        else:
            runs = self._require_runs(context)
            record = runs.get(request.run_id)
            folder = runs.run_dir(record.run_id)
            allowed = listed(record.result)
        cancelled = _Cancellation(context)
        try:
            chunks = read_trace(folder, request.name, allowed, request.offset, request.max_bytes)
            for offset, data, size, eof in chunks:
                if cancelled():
                    return
                yield agent_pb2.FetchProfileResponse(offset=offset, data=data, size=size, eof=eof)
        except TraceNotFound as exc:
            raise NotFound(str(exc)) from None

    @_unary
    def CancelRun(
        self, request: agent_pb2.CancelRunRequest, context: grpc.ServicerContext
    ) -> agent_pb2.CancelRunResponse:
        return agent_pb2.CancelRunResponse(
            run=self._run_pb(self._require_runs(context).cancel(request.run_id))
        )


def _profile_pb(outcome: ProfileOutcome) -> agent_pb2.ProfileServerResponse:
    data = outcome.to_dict()
    return agent_pb2.ProfileServerResponse(
        server_id=outcome.server_id,
        profile_id=outcome.profile_id,
        done=outcome.done,
        ok=outcome.ok if outcome.done else False,
        started_at=outcome.started_at,
        window_seconds=data["window_seconds"],
        requests=data["requests"],
        traces=[
            agent_pb2.ProfileTraceFile(name=t["name"], size_bytes=t["size_bytes"])
            for t in data["traces"]
        ],
        other_files=[
            agent_pb2.ProfileTraceFile(name=t["name"], size_bytes=t["size_bytes"])
            for t in data["other_files"]
        ],
        total_bytes=data["total_bytes"],
        warnings=data["warnings"],
    )


def _cpu_count() -> int:
    return os.cpu_count() or 0
