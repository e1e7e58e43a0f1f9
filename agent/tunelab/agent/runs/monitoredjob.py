"""A benchmark process under a monitor of its own, exactly as a server runs (DESIGN.md, process
model): the monitor is its parent and a child subreaper, so a helper that the benchmark starts
with ``setsid -f`` or a double fork stays in its tree and is stopped with it; it records the exit
code in ``exit.json`` and outlives an agent restart, after which the next agent re-attaches
through its socket.

Files, in the run's folder: ``bench-monitor/`` (the monitor's socket, ``exit.json`` and log) and
``<name>-process.json`` (the leader's pid + create time, the one fact the agent keeps itself:
what the "monitor vanished" fallback may kill, each process verified first).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.procs.monitorclient import (
    MonitorClient,
    MonitorFailed,
    MonitorStatus,
    kill_orphans,
    launch_monitor,
)
from tunelab.agent.procs.process import ProcessId
from tunelab.agent.statefile import read_json, write_json_atomic

log = structlog.get_logger(__name__)

MONITOR_DIR = "bench-monitor"
KILL_TIMEOUT = 10.0
STOP_POLL = 0.05
STOP_SLACK = 5.0  # past grace + kill timeout, how long a stop waits for the monitor to finish
MONITOR_EXIT_WAIT = 5.0  # a monitor whose tree is gone exits within ~20 ms (two empty looks)


class JobFailed(RuntimeError):
    """The benchmark process could not be started, or its monitor vanished."""


class MonitoredJob:
    def __init__(self, job_id: str, workdir: Path, process_file: str) -> None:
        self._id = job_id
        self._dir = workdir / MONITOR_DIR
        self._process_file = workdir / process_file
        self._client = MonitorClient(self._dir)
        self._popen: subprocess.Popen[bytes] | None = None  # the monitor, when ours to reap
        self._seen: set[ProcessId] = set()
        self._exit_code: int | None = None
        self._vanished = ""

    # --- start and attach --------------------------------------------------------------------

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        log_path: Path,
        env: Mapping[str, str],
        field: str,
        stop_grace: float,
    ) -> None:
        """Start ``argv`` under a new monitor; JobFailed when it could not be spawned."""
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        launch = {
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd),
            "log": str(log_path),
            "field": field,
            "spec": {"kind": "benchmark", "stop_grace": stop_grace},
        }
        try:
            self._popen, leader = launch_monitor(self._id, self._dir, launch)
        except InvalidSpec as exc:
            raise JobFailed(f"cannot start the benchmark: {exc}") from exc
        except (MonitorFailed, OSError) as exc:
            raise JobFailed(f"cannot start the benchmark's monitor: {exc}") from exc
        self._seen.add(leader)
        write_json_atomic(self._process_file, [leader.pid, leader.create_time])

    def attach(self) -> bool:
        """Follow a job that an earlier agent started; False when none was started."""
        if not (self._client.has_socket() or self._client.exit_record() is not None):
            return False
        try:
            pid, create_time = read_json(self._process_file)
            self._seen.add(ProcessId(int(pid), float(create_time)))
        except (OSError, ValueError, TypeError):
            pass  # the monitor knows its tree; this file only serves the fallback
        return True

    # --- following ---------------------------------------------------------------------------

    def finished(self) -> bool:
        """The leader has exited and nothing of its tree is left (or the monitor is gone)."""
        status = self._status()
        if status is None:
            return True
        if isinstance(status, _Silent):
            return False
        self._track(status)
        if status.done:
            self._reap(MONITOR_EXIT_WAIT)  # it exits right after its exit.json: no zombie
        return status.done

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def vanished(self) -> str:
        """Why the job ended without an exit record ("" when it has one or is running)."""
        return self._vanished

    def _status(self) -> MonitorStatus | _Silent | None:
        try:
            status = self._client.status()
        except OSError:
            return _NO_ANSWER
        if status is None:
            self._on_monitor_gone()
        return status

    def _track(self, status: MonitorStatus) -> None:
        self._seen |= status.tree
        if status.exited:
            self._exit_code = status.exit_code

    def _on_monitor_gone(self) -> None:
        """No monitor listens: it finished (exit record) or was killed (the fallback)."""
        self._reap(MONITOR_EXIT_WAIT)
        record = self._client.exit_record()
        if record is not None:
            code = record.get("exit_code")
            self._exit_code = code if isinstance(code, int) else None
            return
        if self._vanished:
            return
        killed = kill_orphans(self._seen)
        self._vanished = "its monitor vanished without an exit record (killed?)" + (
            f"; killed leftover pids {killed}" if killed else ""
        )
        log.error("bench_monitor_vanished", job=self._id, killed=killed)

    def _reap(self, wait: float = 0.0) -> None:
        """Collect the monitor's exit status when this agent started it (else init does)."""
        if self._popen is None:
            return
        try:
            self._popen.wait(wait)
        except subprocess.TimeoutExpired:
            log.warning("bench_monitor_lingers", job=self._id, pid=self._popen.pid)

    # --- stopping ----------------------------------------------------------------------------

    def stop(self, grace: float, closing: threading.Event) -> bool:
        """Ask the monitor to run the stop ladder and wait until the tree is gone; True when it
        is (False: something outlived the ladder, or the agent is closing and left the rest of
        the stop to the monitor)."""
        reason = "the run stopped its benchmark"
        status: MonitorStatus | _Silent | None
        try:
            status = self._client.stop(grace, KILL_TIMEOUT, reason)
        except OSError:
            status = _NO_ANSWER
        deadline = time.monotonic() + grace + KILL_TIMEOUT + STOP_SLACK
        while status is not None:
            if isinstance(status, MonitorStatus):
                self._track(status)
                if status.done:
                    break
            if time.monotonic() > deadline or closing.wait(STOP_POLL):
                log.warning("bench_stop_unfinished", job=self._id, closing=closing.is_set())
                return False
            status = self._status()
        if status is None:
            self._on_monitor_gone()
        self._reap(MONITOR_EXIT_WAIT)
        return True


class _Silent:
    """A monitor that exists but did not answer in time (asked again later)."""


_NO_ANSWER = _Silent()
