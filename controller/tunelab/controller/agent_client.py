"""The controller's only door to agents: a protocol (so tests can swap in faults) and the gRPC
implementation with a deadline on every call and one channel per host."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Protocol

import grpc

from tunelab.common.auth import ClientAuth
from tunelab.controller.aiocalls import AioStartRuns, StartRunCall
from tunelab.controller.runreport import RunReport
from tunelab.controller.runwire import run_report
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2

INFO_DEADLINE = 3.0  # GetInfo, GetRun: config agent_call_timeout
RUN_DEADLINE = 10.0  # StartRun, CancelRun (the agent writes its record first): agent_start_timeout
AUDIT_DEADLINE = 60.0


class RunCalls(Protocol):
    """The calls that follow runs: what the attempt driver (dispatch.py) asks of agents. Each
    answer is a plain :class:`RunReport`, built here at the edge (runwire.py)."""

    def start_run(
        self, address: str, token: str | None, run_id: str, spec: run_pb2.RunSpec
    ) -> RunReport: ...
    def start_runs(self, calls: Sequence[StartRunCall]) -> list[Future[RunReport]]: ...
    def get_run(self, address: str, token: str | None, run_id: str) -> RunReport: ...
    def cancel_run(self, address: str, token: str | None, run_id: str) -> RunReport: ...


class AgentClient(RunCalls, Protocol):
    def get_info(self, address: str, token: str | None) -> agent_pb2.GetInfoResponse: ...
    def run_audit(
        self, address: str, token: str | None, only: list[str]
    ) -> agent_pb2.RunAuditResponse: ...
    def stream_logs(
        self, address: str, token: str | None, request: agent_pb2.StreamLogsRequest
    ) -> Iterator[agent_pb2.StreamLogsResponse]: ...
    def fetch_profile(
        self, address: str, token: str | None, request: agent_pb2.FetchProfileRequest
    ) -> Iterator[agent_pb2.FetchProfileResponse]: ...


class GrpcAgentClient:
    """gRPC calls to agents; ``grpc.RpcError`` propagates for the caller to classify."""

    def __init__(
        self,
        default_token: str | None = None,
        info_deadline: float = INFO_DEADLINE,
        run_deadline: float = RUN_DEADLINE,
    ) -> None:
        self._default_token = default_token
        self._info_deadline = info_deadline
        self._run_deadline = run_deadline
        self._stubs: dict[tuple[str, str | None], agent_pb2_grpc.AgentStub] = {}
        self._channels: list[grpc.Channel] = []
        self._lock = threading.Lock()
        self._waves = AioStartRuns(default_token, run_deadline)

    def _stub(self, address: str, token: str | None) -> agent_pb2_grpc.AgentStub:
        key = (address, token or self._default_token)
        with self._lock:
            stub = self._stubs.get(key)
            if stub is None:
                channel = ClientAuth(token=key[1]).channel(address)
                self._channels.append(channel)
                stub = agent_pb2_grpc.AgentStub(channel)
                self._stubs[key] = stub
            return stub

    def get_info(self, address: str, token: str | None) -> agent_pb2.GetInfoResponse:
        request = agent_pb2.GetInfoRequest()
        return self._stub(address, token).GetInfo(request, timeout=self._info_deadline)

    def start_run(
        self, address: str, token: str | None, run_id: str, spec: run_pb2.RunSpec
    ) -> RunReport:
        request = agent_pb2.StartRunRequest(run_id=run_id, spec=spec)
        answer = self._stub(address, token).StartRun(request, timeout=self._run_deadline)
        return run_report(answer.run)

    def start_runs(self, calls: Sequence[StartRunCall]) -> list[Future[RunReport]]:
        """StartRun with no thread waiting on it: a pass that places 200 runs reaches 200
        agents at once, and a hung one holds nothing but its own call."""
        return [_reported(sent) for sent in self._waves.start_runs(calls)]

    def get_run(self, address: str, token: str | None, run_id: str) -> RunReport:
        request = agent_pb2.GetRunRequest(run_id=run_id)
        return run_report(
            self._stub(address, token).GetRun(request, timeout=self._info_deadline).run
        )

    def cancel_run(self, address: str, token: str | None, run_id: str) -> RunReport:
        request = agent_pb2.CancelRunRequest(run_id=run_id)
        return run_report(
            self._stub(address, token).CancelRun(request, timeout=self._run_deadline).run
        )

    def run_audit(
        self, address: str, token: str | None, only: list[str]
    ) -> agent_pb2.RunAuditResponse:
        request = agent_pb2.RunAuditRequest(only=only)
        return self._stub(address, token).RunAudit(request, timeout=AUDIT_DEADLINE)

    def stream_logs(
        self, address: str, token: str | None, request: agent_pb2.StreamLogsRequest
    ) -> Iterator[agent_pb2.StreamLogsResponse]:
        """The call itself (a ``grpc.Call``, so the caller can cancel it)."""
        return self._stub(address, token).StreamLogs(request)

    def fetch_profile(
        self, address: str, token: str | None, request: agent_pb2.FetchProfileRequest
    ) -> Iterator[agent_pb2.FetchProfileResponse]:
        """The call itself (a ``grpc.Call``, so the caller can cancel it)."""
        return self._stub(address, token).FetchProfile(request)

    def close(self) -> None:
        self._waves.close()
        with self._lock:
            for channel in self._channels:
                channel.close()
            self._channels.clear()
            self._stubs.clear()


def _reported(sent: Future[agent_pb2.StartRunResponse]) -> Future[RunReport]:
    """A future of the answer's report, settled when ``sent`` is (with its error, if any)."""
    report: Future[RunReport] = Future()

    def settle(done: Future[agent_pb2.StartRunResponse]) -> None:
        if done.cancelled():
            report.cancel()
            return
        error = done.exception()
        if error is not None:
            report.set_exception(error)
        else:
            report.set_result(run_report(done.result().run))

    sent.add_done_callback(settle)
    return report
