"""Integration: what a caller can make a daemon hold before it has sent a request (issue 23.1).

A real gRPC server (tunelab.common.serving) with the real controller servicer on loopback. A
"headers-only" call is a real call whose request iterator never yields: its headers reach the
server, its message never does — what silenced both daemons on the old edge."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.ports import free_port
from tunelab.common.admission import REPORT_RUN, Admission, peer_address
from tunelab.common.auth import ClientAuth, ServerAuth
from tunelab.common.capacity import Limits
from tunelab.common.serving import Daemon, start_daemon
from tunelab.controller.agent_client import GrpcAgentClient
from tunelab.controller.service import SERVICE_NAME, ControllerService
from tunelab.controller.store import SqliteStore
from tunelab.v1 import controller_pb2, controller_pb2_grpc

X = controller_pb2
TOKEN = "s3cret-admission-token"
LIST_HOSTS = "/tunelab.v1.Controller/ListHosts"
WATCH = "/grpc.health.v1.Health/Watch"


def serve(tmp_path: Path, auth: ServerAuth, limits: Limits) -> tuple[Daemon, Any]:
    store = SqliteStore(tmp_path / "c.db")
    agents = GrpcAgentClient(info_deadline=1.0)
    service = ControllerService(store, agents, wake=lambda poll_hosts: None)
    daemon = start_daemon(
        listen=f"127.0.0.1:{free_port()}",
        auth=auth,
        register=lambda s: controller_pb2_grpc.add_ControllerServicer_to_server(service, s),
        service_names=[SERVICE_NAME],
        limits=limits,
    )

    def close() -> None:
        daemon.stop(1.0)
        agents.close()
        store.close()

    return daemon, close


@pytest.fixture
def never() -> Iterator[threading.Event]:
    """Set at the end, so blocked request iterators finish."""
    release = threading.Event()
    yield release
    release.set()


def headers_only(channel: grpc.Channel, release: threading.Event, method: str = LIST_HOSTS) -> Any:
    """A call whose headers go out and whose request message never does."""

    def requests() -> Iterator[bytes]:
        release.wait(30)
        yield X.ListHostsRequest().SerializeToString()

    call: grpc.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(method)
    return call.future(requests(), timeout=20)


def channel_to(daemon: Daemon, token: str | None = None) -> grpc.Channel:
    address = f"127.0.0.1:{daemon.port}"
    if token is not None:
        return ClientAuth(token=token).channel(address)
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def test_unauthenticated_calls_are_refused_before_their_request_arrives(
    tmp_path: Path, never: threading.Event
) -> None:
    limits = Limits(unary=2, streams=2)
    daemon, close = serve(tmp_path, ServerAuth(token=TOKEN), limits)
    try:
        with channel_to(daemon) as anon:
            # far more than the pool's threads: on the old edge these held every one of them
            calls = [headers_only(anon, never) for _ in range(3 * limits.threads)]
            codes = {call.exception(timeout=15).code() for call in calls}
            assert codes == {grpc.StatusCode.UNAUTHENTICATED}
        assert daemon.gate.awaiting() == 0
        assert daemon.gate.refused["unauthenticated"] == 3 * limits.threads
        with channel_to(daemon, TOKEN) as authed:
            stub = controller_pb2_grpc.ControllerStub(authed)
            assert len(stub.ListHosts(X.ListHostsRequest(), timeout=5).hosts) == 0
    finally:
        close()


def test_calls_awaiting_their_request_are_capped_per_peer_and_end_at_the_read_deadline(
    tmp_path: Path, never: threading.Event
) -> None:
    admission = Admission(read_timeout=1.0, per_peer=3, awaiting=5)
    daemon, close = serve(tmp_path, ServerAuth(), Limits(unary=2, streams=2, admission=admission))
    try:
        with channel_to(daemon) as anon:
            calls = [headers_only(anon, never) for _ in range(10)]
            errors = [call.exception(timeout=15) for call in calls]
            codes = sorted(e.code().name for e in errors)
            # three waited their deadline (and were ended by the server), the rest refused at once
            assert codes == ["DEADLINE_EXCEEDED"] * 3 + ["RESOURCE_EXHAUSTED"] * 7
            late = [e for e in errors if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED]
            assert all("request message not received within 1 s" in e.details() for e in late)
            busy = [e for e in errors if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
            assert all("3 calls from ipv4:127.0.0.1" in e.details() for e in busy)
            assert daemon.gate.awaiting() == 0
            stub = controller_pb2_grpc.ControllerStub(anon)
            assert len(stub.ListHosts(X.ListHostsRequest(), timeout=5).hosts) == 0
    finally:
        close()


def test_a_token_holders_calls_are_never_capped_while_strangers_fill_theirs(
    tmp_path: Path, never: threading.Event
) -> None:
    admission = Admission(read_timeout=30.0, per_peer=2, awaiting=2)
    daemon, close = serve(
        tmp_path, ServerAuth(token=TOKEN), Limits(unary=2, streams=2, admission=admission)
    )
    try:
        with channel_to(daemon) as anon, channel_to(daemon, TOKEN) as authed:
            # health Check is open to strangers: two of them hold the strangers' share
            held = [headers_only(anon, never, "/grpc.health.v1.Health/Check") for _ in range(2)]
            for _ in range(100):
                if daemon.gate.awaiting() == 2:
                    break
                threading.Event().wait(0.05)
            assert daemon.gate.awaiting() == 2
            with pytest.raises(grpc.RpcError) as busy:
                health_pb2_grpc.HealthStub(anon).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            stub = controller_pb2_grpc.ControllerStub(authed)
            for _ in range(5):
                assert len(stub.ListHosts(X.ListHostsRequest(), timeout=5).hosts) == 0
            never.set()
            assert all(call.result(timeout=10) for call in held)
    finally:
        close()


def test_slurm_reports_have_their_own_share_and_get_through_while_strangers_fill_theirs(
    tmp_path: Path, never: threading.Event
) -> None:
    """ReportRun proves itself in its message (a per-attempt token), so it is never Trusted at
    the header stage; before, it waited in the strangers' slots and was refused while they were
    full (audit of issue 23, B1)."""
    admission = Admission(read_timeout=30.0, per_peer=2, awaiting=2)  # ReportRun's share: default
    daemon, close = serve(
        tmp_path, ServerAuth(token=TOKEN), Limits(unary=2, streams=2, admission=admission)
    )
    try:
        with channel_to(daemon) as anon:
            held = [headers_only(anon, never, "/grpc.health.v1.Health/Check") for _ in range(2)]
            held += [headers_only(anon, never, REPORT_RUN) for _ in range(3)]  # in its own share
            for _ in range(100):
                if (daemon.gate.awaiting(), daemon.gate.awaiting(REPORT_RUN)) == (2, 3):
                    break
                threading.Event().wait(0.05)
            assert (daemon.gate.awaiting(), daemon.gate.awaiting(REPORT_RUN)) == (2, 3)
            with pytest.raises(grpc.RpcError) as busy:
                health_pb2_grpc.HealthStub(anon).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            stub = controller_pb2_grpc.ControllerStub(anon)
            report = X.ReportRunRequest(attempt_id="a-1", token="0" * 64)
            for _ in range(5):  # answered by the handler (this controller runs no Slurm jobs)
                with pytest.raises(grpc.RpcError) as answered:
                    stub.ReportRun(report, timeout=5)
                assert answered.value.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "runs no Slurm jobs" in (answered.value.details() or "")
            never.set()
            for call in held:
                call.exception(timeout=10)  # the held calls end (answered, or refused)
    finally:
        close()


def test_with_a_token_health_answers_only_check_to_strangers(tmp_path: Path) -> None:
    daemon, close = serve(tmp_path, ServerAuth(token=TOKEN), Limits(unary=2, streams=2))
    try:
        with channel_to(daemon) as anon:
            health = health_pb2_grpc.HealthStub(anon)
            check = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as refused:
                next(health.Watch(health_pb2.HealthCheckRequest(), timeout=5))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with channel_to(daemon, TOKEN) as authed:
            watch = health_pb2_grpc.HealthStub(authed).Watch(health_pb2.HealthCheckRequest())
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            watch.cancel()
    finally:
        close()


def test_health_watches_have_their_own_cap_and_leave_the_streams_alone(tmp_path: Path) -> None:
    daemon, close = serve(tmp_path, ServerAuth(), Limits(unary=2, streams=1, health_watches=2))
    try:
        with channel_to(daemon) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            watches = [health.Watch(health_pb2.HealthCheckRequest()) for _ in range(2)]
            for watch in watches:
                next(watch)
            with pytest.raises(grpc.RpcError) as refused:
                next(health.Watch(health_pb2.HealthCheckRequest(), timeout=5))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "health watches" in (refused.value.details() or "")
            stub = controller_pb2_grpc.ControllerStub(channel)
            queued = stub.SubmitExperiments(
                X.SubmitExperimentsRequest(
                    spec_yaml='name: w\nserver: {command: [e, "{port}"], ready: {model: m}}\n'
                    "benchmark: {concurrency: [1], requests: 1}\n"
                ),
                timeout=5,
            ).experiments[0]
            real = stub.WatchExperiment(X.WatchExperimentRequest(ids=[queued.id]))
            assert next(real).experiment.id == queued.id  # the one real stream slot is free
            real.cancel()
            for watch in watches:
                watch.cancel()
    finally:
        close()


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:10.0.0.1:5555", "ipv4:10.0.0.1"),
        ("ipv6:[::1]:5555", "ipv6:[::1]"),
        ("unix:/run/x.sock", "unix:/run/x.sock"),
    ],
)
def test_peer_address_drops_the_port(peer: str, address: str) -> None:
    assert peer_address(peer) == address
