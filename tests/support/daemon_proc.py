"""What every daemon a test runs as a child process shares: spawn with output to a log file,
wait for its health check, read its log, SIGKILL it, stop it with SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.support.health import wait_serving

REPO = Path(__file__).resolve().parents[2]
# the daemons started during the current test: a failing test's report carries their logs
STARTED: list[DaemonProcess] = []


class DaemonProcess:
    name = "daemon"

    def __init__(self, address: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.address = address
        self.log_path = log_path
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def spawn(self, timeout: float) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self not in STARTED:
            STARTED.append(self)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        wait_serving(self.address, self.proc, timeout, self.name, self.log)

    def log(self) -> str:
        """The whole log: tests count and search events in it, and a tail loses the first ones
        once the log grows (a 4-trial search logs ~15 KB, so the old 20 KB tail dropped a
        `server_started` line after 5 KB more of warnings). Messages slice their own tail."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode
