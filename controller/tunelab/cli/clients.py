"""The CLI's two clients: ``ControllerClient`` and ``AgentClient``, one method per RPC.

Each command builds its client once (``for_args``) and calls methods; no command builds a stub,
picks a deadline or maps a gRPC error itself. A unary method has one deadline (the client's
default, or the RPC's own where it needs more: an audit, a stop's grace) and turns a gRPC error
into a CliError by common.rpc_error's table, naming that deadline. A streaming method returns
the call (an iterator the caller cancels when done), because following a stream across
reconnects is the command's business (follow.py, ``logs -f``).

``submit_experiments`` sends a client request id (a fresh UUID per command) and re-sends the
same request, with the same id, when the answer was lost (UNAVAILABLE, DEADLINE_EXCEEDED):
the controller returns the group the first one queued, so a retry never queues twice.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol, Self, TypeVar, cast

import grpc

from tunelab.cli.common import agent_channel, controller_target, rpc_error
from tunelab.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    controller_pb2,
    controller_pb2_grpc,
)

Response = TypeVar("Response")
Item = TypeVar("Item", covariant=True)


class Stream(Protocol[Item]):
    """A server stream as the CLI uses it: iterate, then cancel."""

    def __iter__(self) -> Iterator[Item]: ...
    def cancel(self) -> bool: ...


TIMEOUT = 30.0  # a unary call to the controller
HOSTS_TIMEOUT = 15.0  # a call about hosts (the controller answers from its store)
AGENT_TIMEOUT = 15.0  # a unary call to an agent
AUDIT_TIMEOUT = 120.0  # a full audit takes well under a second; NVML on a sick GPU can hang
SUBMIT_RETRIES = 2  # re-sends of a submission whose answer was lost
SUBMIT_RETRY_DELAY = 1.0
_LOST_ANSWER = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class _Client:
    daemon = ""

    def __init__(self, target: str, channel: grpc.Channel, timeout: float) -> None:
        self.target = target
        self.timeout = timeout
        self._channel = channel

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(
        self,
        method: Callable[..., Response],
        request: Any,
        timeout: float | None = None,
    ) -> Response:
        deadline = timeout or self.timeout
        try:
            return method(request, timeout=deadline)
        except grpc.RpcError as exc:
            raise rpc_error(exc, self.target, self.daemon, deadline) from exc


class ControllerClient(_Client):
    daemon = "controller"

    def __init__(self, target: str, channel: grpc.Channel, timeout: float = TIMEOUT) -> None:
        super().__init__(target, channel, timeout)
        self._stub = controller_pb2_grpc.ControllerStub(channel)

    @classmethod
    def for_args(cls, args: argparse.Namespace) -> ControllerClient:
        """The controller named by the flags, environment or config file, authenticated."""
        address, auth = controller_target(args)
        return cls(address, auth.channel(address))

    # experiments
    def submit_experiments(
        self, spec_yaml: str, source: str, request_id: str | None = None
    ) -> controller_pb2.SubmitExperimentsResponse:
        request = controller_pb2.SubmitExperimentsRequest(
            spec_yaml=spec_yaml, source=source, request_id=request_id or uuid.uuid4().hex
        )
        for attempt in range(SUBMIT_RETRIES + 1):
            try:
                # a re-send waits for the connection to come back (within the deadline)
                return self._stub.SubmitExperiments(
                    request, timeout=self.timeout, wait_for_ready=attempt > 0
                )
            except grpc.RpcError as exc:
                if exc.code() not in _LOST_ANSWER or attempt == SUBMIT_RETRIES:
                    raise rpc_error(exc, self.target, self.daemon, self.timeout) from exc
                time.sleep(SUBMIT_RETRY_DELAY)  # then the same request, with the same id
        raise AssertionError("unreachable")  # pragma: no cover

    def list_experiments(
        self, request: controller_pb2.ListExperimentsRequest
    ) -> controller_pb2.ListExperimentsResponse:
        return self._unary(self._stub.ListExperiments, request)

    def get_experiment(
        self, request: controller_pb2.GetExperimentRequest
    ) -> controller_pb2.GetExperimentResponse:
        return self._unary(self._stub.GetExperiment, request)

    def cancel_experiment(
        self, request: controller_pb2.CancelExperimentRequest
    ) -> controller_pb2.CancelExperimentResponse:
        return self._unary(self._stub.CancelExperiment, request)

    def compare_runs(
        self, request: controller_pb2.CompareRunsRequest
    ) -> controller_pb2.CompareRunsResponse:
        return self._unary(self._stub.CompareRuns, request)

    def watch_experiment(
        self, request: controller_pb2.WatchExperimentRequest
    ) -> Stream[controller_pb2.WatchExperimentResponse]:
        """The stream of updates (no deadline: it lasts until the experiments finish)."""
        return cast(Stream[Any], self._stub.WatchExperiment(request))

    def stream_experiment_logs(
        self, request: controller_pb2.StreamExperimentLogsRequest
    ) -> Stream[agent_pb2.StreamLogsResponse]:
        return cast(Stream[Any], self._stub.StreamExperimentLogs(request))

    def fetch_experiment_profile(
        self, request: controller_pb2.FetchExperimentProfileRequest, timeout: float
    ) -> Stream[agent_pb2.FetchProfileResponse]:
        """An attempt's kept trace, in chunks, within ``timeout`` for the whole transfer."""
        return cast(Stream[Any], self._stub.FetchExperimentProfile(request, timeout=timeout))

    # searches
    def get_search(self, group: str) -> controller_pb2.GetSearchResponse | None:
        """None when ``group`` is no search (an ordinary group, or an older controller)."""
        request = controller_pb2.GetSearchRequest(group=group)
        try:
            response: controller_pb2.GetSearchResponse = self._stub.GetSearch(
                request, timeout=self.timeout
            )
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED):
                return None
            raise rpc_error(exc, self.target, self.daemon, self.timeout) from exc
        return response

    def cancel_search(self, group: str) -> controller_pb2.CancelSearchResponse:
        return self._unary(self._stub.CancelSearch, controller_pb2.CancelSearchRequest(group=group))

    # watches
    def add_watch(self, spec_yaml: str, source: str) -> controller_pb2.AddWatchResponse:
        request = controller_pb2.AddWatchRequest(spec_yaml=spec_yaml, source=source)
        return self._unary(self._stub.AddWatch, request)

    def list_watches(self) -> controller_pb2.ListWatchesResponse:
        return self._unary(self._stub.ListWatches, controller_pb2.ListWatchesRequest())

    def get_watch(
        self, name: str, limit: int = 0, before: int = 0, summaries: bool = False
    ) -> controller_pb2.GetWatchResponse:
        """A page of the watch's occurrences: ``limit`` (0: the controller's default) ending
        before occurrence ``before`` (0: the newest)."""
        request = controller_pb2.GetWatchRequest(
            name=name, limit=limit, before=before, summaries=summaries
        )
        return self._unary(self._stub.GetWatch, request)

    def find_watch(
        self, name: str, limit: int = 0, summaries: bool = False
    ) -> controller_pb2.GetWatchResponse | None:
        """None when no watch has this name (or the controller has no watches)."""
        try:
            response: controller_pb2.GetWatchResponse = self._stub.GetWatch(
                controller_pb2.GetWatchRequest(name=name, limit=limit, summaries=summaries),
                timeout=self.timeout,
            )
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED):
                return None
            raise rpc_error(exc, self.target, self.daemon, self.timeout) from exc
        return response

    def set_watch_state(
        self, name: str, state: controller_pb2.WatchState.ValueType
    ) -> controller_pb2.SetWatchStateResponse:
        request = controller_pb2.SetWatchStateRequest(name=name, state=state)
        return self._unary(self._stub.SetWatchState, request)

    def remove_watch(self, name: str) -> controller_pb2.RemoveWatchResponse:
        return self._unary(self._stub.RemoveWatch, controller_pb2.RemoveWatchRequest(name=name))

    # hosts
    def list_hosts(self) -> controller_pb2.ListHostsResponse:
        return self._unary(self._stub.ListHosts, controller_pb2.ListHostsRequest(), HOSTS_TIMEOUT)

    def add_host(self, request: controller_pb2.AddHostRequest) -> controller_pb2.AddHostResponse:
        return self._unary(self._stub.AddHost, request, HOSTS_TIMEOUT)

    def remove_host(self, name: str) -> controller_pb2.RemoveHostResponse:
        return self._unary(
            self._stub.RemoveHost, controller_pb2.RemoveHostRequest(name=name), HOSTS_TIMEOUT
        )

    def update_host(
        self, request: controller_pb2.UpdateHostRequest
    ) -> controller_pb2.UpdateHostResponse:
        return self._unary(self._stub.UpdateHost, request, HOSTS_TIMEOUT)

    def set_host_drain(
        self, request: controller_pb2.SetHostDrainRequest
    ) -> controller_pb2.SetHostDrainResponse:
        return self._unary(self._stub.SetHostDrain, request, HOSTS_TIMEOUT)

    def audit_host(
        self, request: controller_pb2.AuditHostRequest
    ) -> controller_pb2.AuditHostResponse:
        return self._unary(self._stub.AuditHost, request, AUDIT_TIMEOUT)


class AgentClient(_Client):
    daemon = "agent"

    def __init__(self, target: str, channel: grpc.Channel, timeout: float = AGENT_TIMEOUT) -> None:
        super().__init__(target, channel, timeout)
        self._stub = agent_pb2_grpc.AgentStub(channel)

    @classmethod
    def for_args(cls, args: argparse.Namespace) -> AgentClient:
        """The agent of ``--agent``, authenticated."""
        return cls(args.agent, agent_channel(args))

    def run_audit(self, request: agent_pb2.RunAuditRequest) -> agent_pb2.RunAuditResponse:
        return self._unary(self._stub.RunAudit, request, AUDIT_TIMEOUT)

    def start_server(self, request: agent_pb2.StartServerRequest) -> agent_pb2.StartServerResponse:
        return self._unary(self._stub.StartServer, request)

    def get_server(self, request: agent_pb2.GetServerRequest) -> agent_pb2.GetServerResponse:
        return self._unary(self._stub.GetServer, request)

    def list_servers(self, request: agent_pb2.ListServersRequest) -> agent_pb2.ListServersResponse:
        return self._unary(self._stub.ListServers, request)

    def stop_server(
        self, request: agent_pb2.StopServerRequest, timeout: float
    ) -> agent_pb2.StopServerResponse:
        """``timeout``: the stop's own budget (its grace, and time to confirm)."""
        return self._unary(self._stub.StopServer, request, timeout)

    def read_logs(self, request: agent_pb2.StreamLogsRequest) -> list[agent_pb2.StreamLogsResponse]:
        """A log read that ends (no follow), as one unary-like call with the client deadline."""
        return self._unary(
            lambda r, timeout: list(self._stub.StreamLogs(r, timeout=timeout)), request
        )

    def stream_logs(
        self, request: agent_pb2.StreamLogsRequest
    ) -> Stream[agent_pb2.StreamLogsResponse]:
        """The stream of chunks (no deadline: ``logs -f`` follows until stopped)."""
        return cast(Stream[Any], self._stub.StreamLogs(request))

    def watch_server(
        self, request: agent_pb2.WatchServerRequest
    ) -> Stream[agent_pb2.WatchServerResponse]:
        return cast(Stream[Any], self._stub.WatchServer(request))

    def profile_server(
        self, request: agent_pb2.ProfileServerRequest, timeout: float
    ) -> Stream[agent_pb2.ProfileServerResponse]:
        """The profile's stream: the start's answer, then its outcome (``timeout``: the window,
        the stop and the keeping of the traces)."""
        return cast(Stream[Any], self._stub.ProfileServer(request, timeout=timeout))

    def fetch_profile(
        self, request: agent_pb2.FetchProfileRequest, timeout: float
    ) -> Stream[agent_pb2.FetchProfileResponse]:
        return cast(Stream[Any], self._stub.FetchProfile(request, timeout=timeout))
