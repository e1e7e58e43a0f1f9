"""Helpers to start fake servers through a real agent and wait on their states."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2

FAKE_SERVER = Path(__file__).resolve().parents[1] / "fakes" / "lifecycle_server.py"
TERMINAL = {
    server_pb2.SERVER_STATE_STOPPED,
    server_pb2.SERVER_STATE_FAILED,
    server_pb2.SERVER_STATE_KILL_FAILED,
}


def fake_spec(port: int, *fake_args: str, **fields: object) -> server_pb2.ServerSpec:
    argv = [sys.executable, str(FAKE_SERVER), "--port", str(port), *fake_args]
    return server_pb2.ServerSpec(argv=argv, port=port, **fields)  # type: ignore[arg-type]


def start(
    stub: agent_pb2_grpc.AgentStub, spec: server_pb2.ServerSpec, server_id: str = ""
) -> server_pb2.Server:
    return stub.StartServer(
        agent_pb2.StartServerRequest(id=server_id, spec=spec), timeout=10
    ).server


def watch_until(
    stub: agent_pb2_grpc.AgentStub, server_id: str, states: Sequence[int], timeout: float = 30.0
) -> list[server_pb2.Server]:
    """Every update WatchServer sends until one is in ``states`` (or terminal)."""
    seen: list[server_pb2.Server] = []
    for update in stub.WatchServer(agent_pb2.WatchServerRequest(id=server_id), timeout=timeout):
        seen.append(update.server)
        if update.server.state in states or update.server.state in TERMINAL:
            break
    return seen


def get(stub: agent_pb2_grpc.AgentStub, server_id: str) -> server_pb2.Server:
    return stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server


def wait_state(
    stub: agent_pb2_grpc.AgentStub, server_id: str, state: int, timeout: float = 30.0
) -> server_pb2.Server:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server = get(stub, server_id)
        if server.state == state:
            return server
        time.sleep(0.05)
    raise TimeoutError(f"{server_id} not in state {state}: {get(stub, server_id)}")


def logs(stub: agent_pb2_grpc.AgentStub, server_id: str, **request: Any) -> tuple[bytes, int, bool]:
    data = b""
    end = 0
    eof = False
    for chunk in stub.StreamLogs(
        agent_pb2.StreamLogsRequest(server_id=server_id, **request), timeout=30
    ):
        data += chunk.data
        end = chunk.offset + len(chunk.data)
        eof = eof or chunk.eof
    return data, end, eof


def gone(pid: int) -> bool:
    """Dead, or a zombie waiting for a reaper that is not ours."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def ended(process: psutil.Process) -> bool:
    """This very process (pid and start time) is dead or a zombie. Use it instead of
    :func:`gone` where a test forces pid reuse: the number may already name a stranger, or a
    thread of the restarted agent."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def reported_process(stub: agent_pb2_grpc.AgentStub, server_id: str, word: str) -> psutil.Process:
    """The process a fake server printed as ``<word> <pid>``, pinned to its start time."""
    return psutil.Process(reported_pid(stub, server_id, word))


def reported_pid(stub: agent_pb2_grpc.AgentStub, server_id: str, word: str) -> int:
    """The pid a fake server (or one of its children) printed as ``<word> <pid>`` in its log."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = re.search(rf"{word} (\d+)".encode(), logs(stub, server_id)[0])
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise TimeoutError(f"no '{word}' line in the log of {server_id}")
