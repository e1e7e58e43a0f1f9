"""Run the real ``tunelab-agent serve`` as a child process for integration and e2e tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc
from tunelab.auth import ClientAuth
from tunelab.v1 import agent_pb2_grpc

from tests.support.health import wait_serving
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


class AgentProcess:
    """A real agent daemon on a loopback port, with its own state dir and log file."""

    def __init__(
        self, state_dir: Path, extra_args: Sequence[str] = (), token: str | None = None
    ) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.token = token
        self.log_path = state_dir / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "agent",
            "serve",
            "--listen",
            self.address,
            "--state-dir",
            str(self.state_dir),
            *self.extra_args,
        ]

    def start(self, timeout: float = 20.0) -> AgentProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float) -> None:
        wait_serving(self.address, self.proc, timeout, "agent", self.log)

    def channel(self, token: str | None = None) -> grpc.Channel:
        return ClientAuth(token=token if token is not None else self.token).channel(self.address)

    def stub(self, token: str | None = None) -> agent_pb2_grpc.AgentStub:
        return agent_pb2_grpc.AgentStub(self.channel(token))

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def restart(self) -> AgentProcess:
        return self.start()
