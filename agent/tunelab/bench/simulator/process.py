"""Run the simulator as a child process: for tests, benchmarks and the demo.

::

    with SimulatorProcess(["--ttft-ms", "300", "--itl-ms", "97"], log_path) as sim:
        requests.post(sim.url + "/v1/completions", ...)

It listens on a port the kernel picks (``--port 0``) and reports it in its first line, so two
simulators never race for a port.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from tunelab.common.pyexec import python_module_argv
from tunelab.common.spawn import spawn

_LISTENING = re.compile(rb"listening on (http://[\d.]+:(\d+))")


class SimulatorProcess:
    def __init__(self, args: Sequence[str], log_path: Path, startup_timeout: float = 15.0) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0

    def start(self) -> SimulatorProcess:
        argv = python_module_argv("tunelab.bench.simulator", *self.args)
        if "--port" not in self.args:
            argv += ["--port", "0"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = spawn(argv, cwd=self.log_path.parent, log=self.log_path, truncate_log=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.log_path.read_bytes())
            if match:
                self.url = match.group(1).decode()
                self.port = int(match.group(2))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"simulator did not start: {self.log_path.read_text(errors='replace')}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> SimulatorProcess:
        return self.start() if self.proc is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
