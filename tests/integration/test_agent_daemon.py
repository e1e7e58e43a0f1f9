"""Integration: the agent daemon's process behaviour — reflection, health, logs, SIGTERM."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import psutil
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import fake_spec, get, start, watch_until
from tunelab.v1 import agent_pb2, server_pb2


def test_reflection_lists_the_agent_and_health_services(agent: AgentProcess) -> None:
    with grpc.insecure_channel(agent.address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"tunelab.v1.Agent", "grpc.health.v1.Health"} <= services


def test_logs_are_json_lines_when_not_on_a_terminal(agent: AgentProcess) -> None:
    agent.stub().GetInfo(agent_pb2.GetInfoRequest(), timeout=5)
    events = [json.loads(line) for line in agent.log().splitlines() if line.startswith("{")]
    names = {e["event"] for e in events}
    assert {"agent_config", "agent_listening"} <= names
    assert all("timestamp" in e and "level" in e for e in events)


def test_sigterm_is_a_clean_shutdown_that_leaves_servers_running(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    stub = agent.stub()
    server = start(stub, fake_spec(free_port(), "--load-seconds", "0.2"), server_id="keep")
    watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY])

    assert agent.terminate() == 0
    assert "agent_stopped" in agent.log()
    assert psutil.Process(server.pid).is_running()

    agent.restart()
    try:
        adopted = get(agent.stub(), "keep")
        assert adopted.state == server_pb2.SERVER_STATE_READY
        agent.stub().StopServer(agent_pb2.StopServerRequest(id="keep", grace_seconds=5), timeout=60)
    finally:
        agent.terminate()
