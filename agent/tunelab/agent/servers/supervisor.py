"""One thread per live server: watches the process, the log and the readiness probe, and runs the
stop ladder. It is the only code that changes a live server's state after the spawn."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from tunelab.agent.engines.supervision import EngineSupervision
from tunelab.agent.gpu import GpuBackend, GpuError
from tunelab.agent.logfiles import last_lines
from tunelab.agent.servers import process as proc_mod
from tunelab.agent.servers.process import ProcessId
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.spec import MARKER_ENV
from tunelab.agent.servers.states import ServerState

log = structlog.get_logger(__name__)

LOG_TAIL_LINES = 20
DESCENDANT_SCAN_INTERVAL = 1.0
READY_POLL_INTERVAL = 0.1
MAX_LOG_READ = 1 << 20


@dataclass(frozen=True)
class SupervisorSettings:
    probe_interval: float = 0.05  # READY is noticed within this much of the first 2xx
    kill_timeout: float = 10.0  # after SIGKILL, how long processes may take to vanish
    gpu_release_timeout: float = 60.0  # after the processes are gone, how long NVML may lag


class RecordKeeper(Protocol):
    """The registry side of a supervisor: the only way it changes a record."""

    def transition(
        self, server_id: str, target: ServerState, message: str, **updates: Any
    ) -> None: ...

    def update(self, server_id: str, *, persist: bool = False, **updates: Any) -> None: ...

    def view(self, server_id: str) -> ServerRecord: ...


class ServerSupervisor:
    """Owns one server's watch thread (composition, not a Thread subclass: Thread's private
    methods such as ``_stop`` run during ``join()`` and must never be shadowed)."""

    def __init__(
        self,
        keeper: RecordKeeper,
        record: ServerRecord,
        log_path: Path,
        gpu: GpuBackend,
        settings: SupervisorSettings,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self._thread = threading.Thread(target=self.run, name=f"server-{record.id}", daemon=True)
        self._keeper = keeper
        self._id = record.id
        self._spec = record.spec
        self._leader = record.leader
        self._popen = popen
        self._log_path = log_path
        self._gpu = gpu
        self._settings = settings
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._stop_grace: float | None = None
        self._stop_reason = ""
        self._fail_after_stop = False
        # issue 13: phases, failure reasons, probe etiquette, leftovers; fed by the hooks below
        self._engine = EngineSupervision(record, popen is None, settings.probe_interval)
        self._log_pos = max(0, _size(log_path) - 65536) if popen is None else 0
        self._log = log.bind(server_id=record.id, name=record.name)

    # --- requests from other threads ---------------------------------------------------------

    def request_stop(self, grace: float | None, reason: str = "stop requested") -> None:
        if self._stop_grace is None:
            self._stop_grace = self._spec.stop_grace if grace is None else grace
            self._stop_reason = reason
        self._wake.set()

    def close(self) -> None:
        """Agent shutdown: stop watching, leave the server running for the next agent."""
        self._closing.set()
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._loop()
        except Exception:  # a bug here must not leave the server unwatched silently
            self._log.exception("supervisor_crashed")
            raise

    def _loop(self) -> None:
        last_scan = 0.0
        while not self._closing.is_set():
            if self._stop_grace is not None:
                self._run_stop_ladder()
                return
            exited, code = self._exit_status()
            if exited:
                self._on_exit(code)
                return
            record = self._keeper.view(self._id)
            now = time.monotonic()
            if now - last_scan >= DESCENDANT_SCAN_INTERVAL:
                self._scan_descendants(record)
                last_scan = now
            if record.state in (ServerState.STARTING, ServerState.LOADING):
                self._read_progress(record)
                if time.time() > record.started_at + self._spec.startup_timeout:
                    self._on_startup_timeout(record)
                    continue
                result = self._engine.probe()
                if result is not None and result.ready:
                    self._on_ready(record)
                    continue
                self._wake.wait(self._settings.probe_interval)
            else:
                self._wake.wait(READY_POLL_INTERVAL)
            self._wake.clear()

    def _exit_status(self) -> tuple[bool, int | None]:
        if self._popen is not None:
            code = self._popen.poll()
            return code is not None, code
        if self._leader is None or not self._leader.alive():
            return True, None  # adopted: not our child, the exit code went to its new parent
        return False, None

    # --- events ------------------------------------------------------------------------------

    def _read_progress(self, record: ServerRecord) -> None:
        try:
            with self._log_path.open("rb") as f:
                f.seek(self._log_pos)
                data = f.read(MAX_LOG_READ)
        except FileNotFoundError:
            return
        if not data:
            return
        self._log_pos += len(data)
        fields = self._engine.on_log(data, time.time())
        if fields is not None:
            if record.state is ServerState.STARTING:
                self._keeper.transition(
                    self._id, ServerState.LOADING, self._engine.label(), **fields
                )
            else:
                self._keeper.update(self._id, **fields)

    def _on_ready(self, record: ServerRecord) -> None:
        now = time.time()
        self._read_progress(record)
        self._keeper.transition(
            self._id,
            ServerState.READY,
            f"GET {self._spec.ready_path} answered 2xx",
            ready_at=now,
            ready_seconds=round(now - record.started_at, 4),
            **self._engine.on_ready(now),
        )
        self._log.info("server_ready", seconds=round(now - record.started_at, 3))

    def _scan_descendants(self, record: ServerRecord) -> None:
        if self._leader is None:
            return
        found = proc_mod.descendants(self._leader)
        self._engine.on_scan(p.pid for p in found | {self._leader})
        if not found <= record.descendants:
            self._keeper.update(self._id, persist=True, descendants=record.descendants | found)

    def _on_exit(self, code: int | None) -> None:
        record = self._keeper.view(self._id)
        when = {
            ServerState.STARTING: "while starting",
            ServerState.LOADING: "while loading",
            ServerState.READY: "after READY",
        }.get(record.state, "")
        how = (
            "exit code unknown: it was adopted, not our child"
            if code is None
            else _describe_exit(code)
        )
        tail = last_lines(self._log_path, LOG_TAIL_LINES)
        self._read_progress(record)
        failure, fields = self._engine.on_exit(code, tail, (p.pid for p in record.process_ids()))
        self._keeper.transition(
            self._id,
            ServerState.FAILED,
            f"exited {when} ({how}): {failure.reason.value}: {failure.line}",
            exit_code=code,
            finished_at=time.time(),
            log_tail=tail,
            **fields,
        )
        self._log.warning("server_exited", exit_code=code, during=record.state.value)
        # Children of a crashed engine (schedulers, TP workers) can outlive it holding GPU memory.
        leftovers = [p for p in self._known_processes(record) if p.alive()]
        if leftovers:
            for leftover in leftovers:
                leftover.signal(signal.SIGKILL)
            self._log.warning("killed_leftovers", pids=[p.pid for p in leftovers])
        if not any(p.alive() for p in leftovers):
            self._keeper.update(self._id, persist=True, **self._engine.after_stop())

    def _on_startup_timeout(self, record: ServerRecord) -> None:
        detail = (
            f"not ready after the {self._spec.startup_timeout:g} s startup timeout "
            f"(last probe: {self._engine.probe_detail()})"
        )
        tail = last_lines(self._log_path, LOG_TAIL_LINES)
        failure, fields = self._engine.on_timeout(tail, detail)
        self._keeper.update(self._id, **fields)
        self._fail_after_stop = True
        self.request_stop(None, f"{detail}: {failure.reason.value}")

    # --- the stop ladder ---------------------------------------------------------------------

    def _known_processes(self, record: ServerRecord) -> set[ProcessId]:
        known = set(record.process_ids())
        if self._leader is not None:
            known |= proc_mod.descendants(self._leader)
        known |= proc_mod.processes_with_env(MARKER_ENV, self._id)
        return known

    def _run_stop_ladder(self) -> None:
        record = self._keeper.view(self._id)
        if record.state is not ServerState.STOPPING:
            self._keeper.transition(self._id, ServerState.STOPPING, self._stop_reason)
        known = self._known_processes(record)
        self._engine.on_scan(p.pid for p in known)
        self._keeper.update(self._id, persist=True, descendants=known - {self._leader})
        grace = self._stop_grace if self._stop_grace is not None else self._spec.stop_grace
        outcome = (
            proc_mod.stop_process_tree(
                self._leader,
                known,
                grace,
                kill_timeout=self._settings.kill_timeout,
                reap=self._reap,
            )
            if self._leader is not None
            else proc_mod.StopOutcome(False, ())
        )
        exit_code = self._popen.returncode if self._popen is not None else None
        tail = last_lines(self._log_path, LOG_TAIL_LINES)
        done = {"exit_code": exit_code, "log_tail": tail}
        if outcome.survivors:
            pids = ", ".join(str(p.pid) for p in outcome.survivors)
            self._finish(
                ServerState.KILL_FAILED, f"{self._stop_reason}; pids {pids} survived SIGKILL", done
            )
            return
        how = "after SIGKILL" if outcome.escalated else "after SIGTERM"
        gpu_note, holders = self._wait_gpu_release(known)
        if holders:
            self._finish(
                ServerState.KILL_FAILED,
                f"{self._stop_reason}; processes gone {how} but NVML still shows pids {holders} "
                f"after {self._settings.gpu_release_timeout:g} s",
                done,
            )
            return
        target = ServerState.FAILED if self._fail_after_stop else ServerState.STOPPED
        done.update(self._engine.after_stop())
        self._finish(target, f"{self._stop_reason}; stopped {how}; {gpu_note}", done)

    def _finish(self, target: ServerState, message: str, updates: dict[str, Any]) -> None:
        self._keeper.transition(self._id, target, message, finished_at=time.time(), **updates)
        self._log.info("server_stopped", state=target.value, detail=message)

    def _reap(self) -> None:
        if self._popen is not None:
            self._popen.poll()

    def _wait_gpu_release(self, known: set[ProcessId]) -> tuple[str, list[int]]:
        """Wait until NVML lists none of ``known``; returns (note, pids still listed)."""
        if not self._gpu.available():
            self._keeper.update(self._id, gpu_check_skipped=True)
            return f"GPU release not checked: {self._gpu.unavailable_reason()}", []
        pids = {p.pid for p in known}
        deadline = time.monotonic() + self._settings.gpu_release_timeout
        start = time.monotonic()
        holders: list[int] = []
        while True:
            try:
                holders = sorted({p.pid for p in self._gpu.compute_processes() if p.pid in pids})
            except GpuError as exc:
                self._keeper.update(self._id, gpu_check_skipped=True)
                return f"GPU release not checked: {exc}", []
            if not holders:
                return f"NVML shows no process of it ({time.monotonic() - start:.2f} s)", []
            if time.monotonic() >= deadline:
                return "", holders
            time.sleep(0.05)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
