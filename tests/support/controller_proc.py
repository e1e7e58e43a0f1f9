"""Run the real ``tunelab controller serve`` as a child process, and the CLI against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from tunelab.v1 import controller_pb2, controller_pb2_grpc

from tests.support.health import wait_serving
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
FAST = {
    "TUNELAB_CONTROLLER_TICK": "0.2s",
    "TUNELAB_CONTROLLER_HOST_POLL_INTERVAL": "0.5s",
    "TUNELAB_CONTROLLER_ATTEMPT_POLL_INTERVAL": "0.25s",
    "TUNELAB_CONTROLLER_SCRAPE_INTERVAL": "0.5s",
}


class ControllerProcess:
    def __init__(
        self, workdir: Path, extra_args: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> None:
        self.workdir = workdir
        self.db = workdir / "controller.db"
        self.port = free_port()
        self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.env = {**FAST, **(env or {})}
        self.log_path = workdir / "controller.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> ControllerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        metrics = f"127.0.0.1:{self.metrics_port}"
        command = [
            sys.executable,
            "-m",
            "controller",
            "controller",
            "serve",
            "--listen",
            self.address,
        ]
        command += ["--db", str(self.db), "--metrics-listen", metrics, *self.extra_args]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )  # fmt: skip
        wait_serving(self.address, self.proc, timeout, "controller", self.log)
        return self

    def stub(self) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(grpc.insecure_channel(self.address))

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def cli(
        self, *args: str, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TUNELAB_CONTROLLER": self.address,
            "XDG_CONFIG_HOME": str(self.workdir / "cfg"),
        }
        return subprocess.run(
            [sys.executable, "-m", "controller", *args],
            cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env, input=stdin,
        )  # fmt: skip

    def cli_json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def experiment(self, experiment_id: str) -> controller_pb2.Experiment:
        return (
            self.stub()
            .GetExperiment(controller_pb2.GetExperimentRequest(id=experiment_id), timeout=10)
            .experiment
        )

    def wait_for(
        self, experiment_id: str, predicate: Any, timeout: float = 60.0
    ) -> controller_pb2.Experiment:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            experiment = self.experiment(experiment_id)
            if predicate(experiment):
                return experiment
            time.sleep(0.1)
        raise TimeoutError(
            f"{experiment_id} never matched: {self.experiment(experiment_id)}\n{self.log()[-4000:]}"
        )
