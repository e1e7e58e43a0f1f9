"""Run the real ``tunelab-agent serve`` as a child process for integration and e2e tests."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import grpc

from tests.support.daemon_proc import DaemonProcess
from tests.support.ports import free_port
from tunelab.common.auth import ClientAuth
from tunelab.v1 import agent_pb2_grpc


class AgentProcess(DaemonProcess):
    """A real agent daemon on a loopback port, with its own state dir and log file."""

    name = "agent"

    def __init__(
        self,
        state_dir: Path,
        extra_args: Sequence[str] = (),
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        super().__init__(f"127.0.0.1:{self.port}", state_dir / "agent.log", env)
        self.state_dir = state_dir
        self.extra_args = list(extra_args)
        self.token = token

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tunelab.agent",
            "serve",
            "--listen",
            self.address,
            "--state-dir",
            str(self.state_dir),
            *self.extra_args,
        ]

    def start(self, timeout: float = 20.0) -> AgentProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.spawn(timeout)
        return self

    def channel(self, token: str | None = None) -> grpc.Channel:
        return ClientAuth(token=token if token is not None else self.token).channel(self.address)

    def stub(self, token: str | None = None) -> agent_pb2_grpc.AgentStub:
        return agent_pb2_grpc.AgentStub(self.channel(token))

    def restart(self) -> AgentProcess:
        return self.start()
