"""Integration: the RPC edge both daemons share (tunelab.common.serving) — a real gRPC server on
loopback serving the real controller servicer over a SQLite store that a test makes fail or
block: capped calls, health always answered, errors a person can act on, no raw exception text."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from structlog.testing import capture_logs

from tests.support.ports import free_port
from tunelab.common.auth import ServerAuth
from tunelab.common.capacity import Limits
from tunelab.common.serving import MAX_REQUEST_BYTES, Daemon, start_daemon
from tunelab.controller.agent_client import GrpcAgentClient
from tunelab.controller.service import SERVICE_NAME, ControllerService
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.v1 import controller_pb2, controller_pb2_grpc

X = controller_pb2
SECRET = "/srv/secret/controller.db"


class FaultyStore(SqliteStore):
    """A real store whose host listing fails like a broken disk, or blocks until released."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.fail = False
        self.release = threading.Event()
        self.blocked = threading.Semaphore(0)
        self.block = False

    def list_hosts(self) -> list[HostRow]:
        if self.fail:
            raise sqlite3.OperationalError(f"disk I/O error reading {SECRET}")
        if self.block:
            self.blocked.release()
            self.release.wait(20)
        return super().list_hosts()


Served = tuple[Daemon, "FaultyStore", controller_pb2_grpc.ControllerStub]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = FaultyStore(tmp_path / "c.db")
    agents = GrpcAgentClient(info_deadline=1.0)
    service = ControllerService(store, agents, wake=lambda poll_hosts: None)
    daemon = start_daemon(
        listen=f"127.0.0.1:{free_port()}",
        auth=ServerAuth(),
        register=lambda s: controller_pb2_grpc.add_ControllerServicer_to_server(service, s),
        service_names=[SERVICE_NAME],
        limits=Limits(unary=2, streams=2),
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
    try:
        yield daemon, store, controller_pb2_grpc.ControllerStub(channel)
    finally:
        store.release.set()
        channel.close()
        daemon.stop(1.0)
        agents.close()
        store.close()


def health(port: int) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)


def test_an_internal_error_is_internal_with_an_id_and_no_exception_text(served: Any) -> None:
    _, store, stub = served
    store.fail = True
    with capture_logs() as logs, pytest.raises(grpc.RpcError) as failed:
        stub.ListHosts(X.ListHostsRequest(), timeout=5)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    details = failed.value.details() or ""
    assert SECRET not in details and "OperationalError" not in details and "disk" not in details
    [logged] = [e for e in logs if e["event"] == "rpc_internal_error"]
    assert logged["error_id"] in details and logged["method"] == "ListHosts"
    assert "the controller's log has the details" in details


def test_bad_fields_are_invalid_argument_naming_the_field(served: Any) -> None:
    _, _, stub = served
    with pytest.raises(grpc.RpcError) as bad:
        stub.ListExperiments(
            X.ListExperimentsRequest(states=[X.ExperimentState.ValueType(99)]), timeout=5
        )
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (bad.value.details() or "").startswith("states: ")


def test_an_unreachable_agent_behind_the_controller_is_failed_precondition(served: Any) -> None:
    _, _, stub = served
    stub.AddHost(X.AddHostRequest(name="gone", address=f"127.0.0.1:{free_port()}"), timeout=5)
    with pytest.raises(grpc.RpcError) as proxied:
        stub.AuditHost(X.AuditHostRequest(name="gone"), timeout=30)
    # the controller answered: not "cannot reach" it (exit 3), but the agent it could not reach
    assert proxied.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (proxied.value.details() or "").startswith("agent cannot be reached")


def test_busy_unary_slots_answer_resource_exhausted_while_health_still_answers(served: Any) -> None:
    daemon, store, stub = served
    store.block = True
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(stub.ListHosts, X.ListHostsRequest(), timeout=20) for _ in range(2)]
        for _ in held:
            assert store.blocked.acquire(timeout=10)  # both slots taken, inside the handler
        with pytest.raises(grpc.RpcError) as busy:
            stub.ListHosts(X.ListHostsRequest(), timeout=5)
        assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limit 2" in (busy.value.details() or "")
        assert health(daemon.port).status == health_pb2.HealthCheckResponse.SERVING
        store.release.set()
        assert all(len(f.result(10).hosts) == 0 for f in held)
    assert daemon.capacity.unary.open == 0


def test_streams_beyond_the_cap_are_refused_and_a_closed_one_frees_its_slot(served: Any) -> None:
    daemon, _, stub = served
    queued = stub.SubmitExperiments(
        X.SubmitExperimentsRequest(
            spec_yaml='name: w\nserver: {command: [e, "{port}"], ready: {model: m}}\n'
            "benchmark: {concurrency: [1], requests: 1}\n"
        ),
        timeout=5,
    ).experiments[0]
    request = X.WatchExperimentRequest(ids=[queued.id])
    watches = [stub.WatchExperiment(request) for _ in range(2)]
    for watch in watches:
        next(watch)
    with pytest.raises(grpc.RpcError) as refused:
        next(stub.WatchExperiment(request))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(stub.ListHosts(X.ListHostsRequest(), timeout=2).hosts) == 0  # unary unaffected
    watches.pop().cancel()
    for _ in range(100):
        if daemon.capacity.streams.open < 2:
            break
        threading.Event().wait(0.05)
    again = stub.WatchExperiment(request)
    assert next(again).experiment.id == queued.id
    again.cancel()
    watches[0].cancel()


def test_a_request_over_the_size_limit_is_refused_before_any_handler(served: Any) -> None:
    _, _, stub = served
    with pytest.raises(grpc.RpcError) as big:
        stub.SubmitExperiments(
            X.SubmitExperimentsRequest(spec_yaml="#" * (MAX_REQUEST_BYTES + 1)), timeout=10
        )
    assert big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize("size", [10_000, 100_000])
def test_a_huge_id_is_not_found_and_not_echoed_whole(served: Any, size: int) -> None:
    # issue 23: a 10 KB id was echoed whole, a 100 KB one gave a size error instead
    _, _, stub = served
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetExperiment(X.GetExperimentRequest(id="x" * size), timeout=5)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    details = missing.value.details() or ""
    assert len(details) < 200 and f"({size} characters)" in details


def test_a_control_character_in_a_host_label_value_is_refused(served: Any) -> None:
    # issue 23: a NUL in a label value was accepted, then nothing ever matched it
    _, _, stub = served
    request = X.AddHostRequest(name="h", address="127.0.0.1:1", labels={"pool": "a\0b"})
    with pytest.raises(grpc.RpcError) as bad:
        stub.AddHost(request, timeout=5)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (bad.value.details() or "").startswith("labels.'pool': value must be")


def test_a_metrics_url_on_another_host_than_the_agents_is_refused(served: Any) -> None:
    # issue 23: --metrics-url accepted any host, which the controller then fetched every scrape
    _, _, stub = served
    request = X.AddHostRequest(
        name="h", address="gpu-1.lab:50051", metrics_url="http://169.254.169.254/latest/meta-data"
    )
    with pytest.raises(grpc.RpcError) as bad:
        stub.AddHost(request, timeout=5)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not the agent's host 'gpu-1.lab'" in (bad.value.details() or "")
    same = X.AddHostRequest(
        name="h", address="GPU-1.lab:50051", metrics_url="http://gpu-1.lab:9473/metrics"
    )
    assert stub.AddHost(same, timeout=5).host.metrics_url == "http://gpu-1.lab:9473/metrics"
