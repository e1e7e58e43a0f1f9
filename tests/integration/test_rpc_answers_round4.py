"""Integration: answers that real gRPC callers got wrong before issue 36.6.

- ``StopServer`` with no client deadline: gRPC reports a missing deadline as a huge
  ``time_remaining()``, the agent waited that long on a condition, and ``threading`` raised
  ``OverflowError``: the caller got INTERNAL although the stop happened.
- An id of 100 KB echoed whole in an error message: gRPC sends the message as trailing metadata,
  past the caller's metadata limit, so the caller got a metadata-size error instead of NOT_FOUND.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tests.support.ports import free_port
from tests.support.servers import fake_spec, start, watch_until
from tunelab.common.rpcerrors import MESSAGE_CHARS
from tunelab.v1 import agent_pb2, controller_pb2, server_pb2

S = server_pb2
HUGE = "x" * 100_000


def test_stop_server_without_a_client_deadline_answers_the_stopped_server(
    agent: AgentProcess,
) -> None:
    stub = agent.stub()
    server = start(stub, fake_spec(free_port(), "--load-seconds", "0.2", stop_grace_seconds=5.0))
    watch_until(stub, server.id, [S.SERVER_STATE_READY])

    call = stub.StopServer.future(agent_pb2.StopServerRequest(id=server.id))  # no timeout
    stopped = call.result(timeout=120).server  # our own bound on the wait, not the call's

    assert stopped.state == S.SERVER_STATE_STOPPED


def _refused(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


def test_a_100kb_id_is_not_found_with_a_short_message_from_the_agent(agent: AgentProcess) -> None:
    stub = agent.stub()
    calls = [
        lambda: stub.GetServer(agent_pb2.GetServerRequest(id=HUGE), timeout=10),
        lambda: stub.StopServer(agent_pb2.StopServerRequest(id=HUGE), timeout=10),
        lambda: stub.GetRun(agent_pb2.GetRunRequest(run_id=HUGE), timeout=10),
    ]
    for call in calls:
        error = _refused(call)
        assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
        assert "100000 characters" in (error.details() or "")
        assert len(error.details() or "") < 300


def test_a_100kb_id_is_not_found_with_a_short_message_from_the_controller(
    tmp_path: Path,
) -> None:
    controller = ControllerProcess(tmp_path / "controller").start()
    try:
        stub = controller.stub()
        calls = [
            lambda: stub.GetSearch(controller_pb2.GetSearchRequest(group=HUGE), timeout=10),
            lambda: stub.GetExperiment(controller_pb2.GetExperimentRequest(id=HUGE), timeout=10),
        ]
        for call in calls:
            error = _refused(call)
            assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
            assert len(error.details() or "") < 300
        # whatever a handler says, no message is longer than the cap
        bad = controller_pb2.AddHostRequest(name="h", address=f"{HUGE}:x")
        error = _refused(lambda: stub.AddHost(bad, timeout=10))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert len(error.details() or "") <= MESSAGE_CHARS + 100
    finally:
        controller.terminate()
