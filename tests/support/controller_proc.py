"""Run the real ``tunelab controller serve`` as a child process, and the CLI against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from tests.support.daemon_proc import REPO, DaemonProcess
from tests.support.ports import free_port
from tunelab.v1 import controller_pb2, controller_pb2_grpc

FAST = {
    "TUNELAB_CONTROLLER_TICK": "0.2s",
    "TUNELAB_CONTROLLER_HOST_POLL_INTERVAL": "0.5s",
    "TUNELAB_CONTROLLER_ATTEMPT_POLL_INTERVAL": "0.25s",
    "TUNELAB_CONTROLLER_SCRAPE_INTERVAL": "0.5s",
}


class ControllerProcess(DaemonProcess):
    name = "controller"

    def __init__(
        self, workdir: Path, extra_args: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        super().__init__(
            f"127.0.0.1:{self.port}", workdir / "controller.log", {**FAST, **(env or {})}
        )
        self.workdir = workdir
        self.db = workdir / "controller.db"
        self.metrics_port = free_port()
        self.extra_args = list(extra_args)

    def command(self) -> list[str]:
        metrics = f"127.0.0.1:{self.metrics_port}"
        command = [sys.executable, "-m", "tunelab.cli", "controller", "serve"]
        command += ["--listen", self.address, "--db", str(self.db), "--metrics-listen", metrics]
        return [*command, *self.extra_args]

    def start(self, timeout: float = 20.0) -> ControllerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.spawn(timeout)
        return self

    def stub(self) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(grpc.insecure_channel(self.address))

    def cli(
        self, *args: str, timeout: float = 120, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TUNELAB_CONTROLLER": self.address,
            "XDG_CONFIG_HOME": str(self.workdir / "cfg"),
        }
        return subprocess.run(
            [sys.executable, "-m", "tunelab.cli", *args],
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
