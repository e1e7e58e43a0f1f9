"""One thread per live server: watches the server (through its monitor), the log and the readiness
probe, and drives the stop. It is the only code that changes a live server's state after the spawn.

The monitor owns the processes: it reaps them, kills leftovers, runs the signal ladder and records
the exit code. This thread asks it (``status``/``stop`` on its socket), notices the leader's exit at
once through a pidfd, and turns what the monitor reports into state transitions.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Unpack

import structlog

from tunelab.agent.gpu import GpuBackend, GpuError
from tunelab.agent.logfiles import last_lines, open_log
from tunelab.agent.procs.monitorclient import MonitorClient, MonitorStatus, kill_orphans
from tunelab.agent.procs.process import ProcessId
from tunelab.agent.servers.engineside import EngineSupervision
from tunelab.agent.servers.probe import ProbeResult
from tunelab.agent.servers.record import ServerChanges, ServerRecord
from tunelab.agent.servers.states import ServerState

log = structlog.get_logger(__name__)

LOG_TAIL_LINES = 20
DESCENDANT_SCAN_INTERVAL = 1.0  # how often the monitor is asked for the tree
STOP_POLL = 0.02  # how often a stop asks the monitor whether the tree is gone
MONITOR_RETRY = 1.0  # a monitor that did not answer is asked again after this
# The leftover scan reads every process's maps and fds (thousands of lines for a CUDA process):
# each second while the engine makes its files (start-up and its first minute of serving), then
# every 15 s, and at once whenever the tree gains a process and before a stop.
LEFTOVER_SCAN_EARLY = 1.0
LEFTOVER_SCAN_SETTLED = 15.0
LEFTOVER_SETTLE = 60.0
MAX_LOG_READ = 1 << 20
WRONG_MODEL_GRACE = 5.0
PORT_MISMATCH_GRACE = 3.0  # after the ready line names another port, the probed one may yet open
CRASH_BACKOFF = 0.5  # a crashed pass is retried after this, doubling up to the max
CRASH_BACKOFF_MAX = 30.0  # a server listing other models this long has a wrong ready model


@dataclass(frozen=True)
class SupervisorSettings:
    probe_interval: float = 0.05  # READY is noticed within this much of the first 2xx
    kill_timeout: float = 10.0  # after SIGKILL, how long processes may take to vanish
    gpu_release_timeout: float = 60.0  # after the processes are gone, how long NVML may lag


class RecordKeeper(Protocol):
    """The registry side of a supervisor: the only way it changes a record."""

    def transition(
        self, server_id: str, target: ServerState, message: str, **changes: Unpack[ServerChanges]
    ) -> None: ...

    def update(
        self, server_id: str, *, persist: bool = False, **changes: Unpack[ServerChanges]
    ) -> None: ...

    def view(self, server_id: str) -> ServerRecord: ...

    def state_of(self, server_id: str) -> ServerState: ...


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
        monitor: MonitorClient,
        monitor_popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self._thread = threading.Thread(target=self.run, name=f"server-{record.id}", daemon=True)
        self._keeper = keeper
        self._id = record.id
        self._spec = record.spec
        self._leader = record.leader
        self._monitor = monitor
        self._monitor_popen = monitor_popen  # ours to reap when this agent started it
        self._pidfd = _open_pidfd(self._leader)
        self._seen: set[ProcessId] = set(record.process_ids())
        self._exit_code: int | None = None
        self._log_path = log_path
        self._gpu = gpu
        self._settings = settings
        self._wake = Waker()
        self._started_at = record.started_at
        self._closing = threading.Event()
        self._stop_grace: float | None = None
        self._stop_reason = ""
        self._fail_after_stop = False
        self._lasting: dict[str, float] = {}  # a cause of never being ready -> first seen
        self._next_leftover_scan = 0.0
        # an adopted READY server settled long ago; a new one settles a minute after READY
        self._settles_at = 0.0 if record.state is ServerState.READY else math.inf
        # issue 13: phases, failure reasons, probe etiquette, leftovers; fed by the hooks below
        self._engine = EngineSupervision(record, monitor_popen is None, settings.probe_interval)
        self._log_pos = max(0, _size(log_path) - 65536) if monitor_popen is None else 0
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
        """The loop, restarted after a crash: a bug in one pass must not leave a live server
        unwatched (no READY, no startup timeout, no stop) for the rest of its life."""
        backoff = CRASH_BACKOFF
        try:
            while True:
                try:
                    self._loop()
                    return
                except Exception:
                    self._log.exception("supervisor_crashed", retry_in=backoff)
                if self._keeper.view(self._id).state.is_terminal():
                    return
                if self._closing.wait(backoff):
                    return
                backoff = min(backoff * 2, CRASH_BACKOFF_MAX)
        finally:
            if self._pidfd is not None:
                os.close(self._pidfd)
            self._wake.close()
            self._reap_monitor()

    def _reap_monitor(self) -> None:
        """The monitor exits once it has written the exit record; collect it (never block the
        agent's shutdown on it: a monitor left running is adopted by init)."""
        if self._monitor_popen is None:
            return
        deadline = time.monotonic() + 30.0
        while self._monitor_popen.poll() is None and time.monotonic() < deadline:
            if self._closing.wait(0.1):
                return

    def _loop(self) -> None:
        """Starting: read the log and probe every ``probe_interval``. Otherwise the thread
        sleeps until the leader exits (its pidfd), a stop or shutdown wakes it, or the next
        look at the tree is due: a READY server costs one monitor question a second, and no
        copy of its record (issue 22: 1.15 % of a core per idle server before)."""
        last_scan = 0.0
        while not self._closing.is_set():
            if self._stop_grace is not None:
                self._run_stop()
                return
            now = time.monotonic()
            if self._leader_exited() or now - last_scan >= DESCENDANT_SCAN_INTERVAL:
                last_scan = now
                status = self._ask_monitor()
                if status is None:
                    self._on_monitor_gone()
                    return
                if isinstance(status, MonitorStatus):
                    self._track(status)
                    if status.exited:
                        self._on_exit(status.exit_code)
                        return
            if self._keeper.state_of(self._id) in (ServerState.STARTING, ServerState.LOADING):
                self._read_progress()
                if time.time() > self._started_at + self._spec.startup_timeout:
                    self._on_startup_timeout()
                    continue
                result = self._engine.probe()
                if result is not None and result.ready:
                    self._on_ready()
                    continue
                if result is not None and self._fail_when_lasting(
                    "model", self._wrong_model(result), now, WRONG_MODEL_GRACE
                ):
                    continue
                elsewhere = self._engine.port_mismatch(now)
                if self._fail_when_lasting("port", elsewhere, now, PORT_MISMATCH_GRACE):
                    continue
                self._wake.wait(self._settings.probe_interval)
            elif self._leader_exited():  # the monitor has not reaped it yet: ask again soon
                self._wake.wait(STOP_POLL)
            else:
                due = last_scan + DESCENDANT_SCAN_INTERVAL - time.monotonic()
                self._wake.wait(max(0.0, due), self._pidfd)
            self._wake.clear()

    def _leader_exited(self) -> bool:
        """The pidfd turns readable the instant the leader exits: no polling of the monitor."""
        if self._pidfd is None:
            return True
        readable, _, _ = select.select([self._pidfd], [], [], 0)
        return bool(readable)

    def _ask_monitor(self, stop: tuple[float, str] | None = None) -> MonitorStatus | _Silent | None:
        """The monitor's status; None when no monitor listens any more; _NO_ANSWER when it
        exists but did not answer in time (asked again later)."""
        try:
            if stop is not None:
                return self._monitor.stop(stop[0], self._settings.kill_timeout, stop[1])
            return self._monitor.status()
        except (ConnectionResetError, BrokenPipeError):
            # it closed the connection while exiting: ask again at once (the socket goes next)
            self._closing.wait(STOP_POLL)
            return _NO_ANSWER
        except OSError as exc:
            self._log.warning("monitor_not_answering", error=str(exc))
            self._closing.wait(MONITOR_RETRY)
            return _NO_ANSWER

    def _track(self, status: MonitorStatus) -> None:
        now = time.monotonic()
        if now >= self._next_leftover_scan or not status.tree <= self._seen:
            self._engine.on_scan(p.pid for p in status.tree)
            settled = now >= self._settles_at
            self._next_leftover_scan = now + (
                LEFTOVER_SCAN_SETTLED if settled else LEFTOVER_SCAN_EARLY
            )
        if status.exit_code is not None:
            self._exit_code = status.exit_code
        if not status.tree <= self._seen:
            self._seen |= status.tree
            record = self._keeper.view(self._id)
            self._keeper.update(
                self._id, persist=True, descendants=self._seen - {self._leader} | record.descendants
            )

    # --- events ------------------------------------------------------------------------------

    def _read_progress(self) -> None:
        """Turn new log lines into phase and progress. The state is read afresh: a caller's
        view may predate a LOADING this thread wrote a moment ago (a probe answering in the
        same pass as new log lines once made it LOADING -> LOADING and killed the watch)."""
        try:
            with open_log(self._log_path) as f:
                f.seek(self._log_pos)
                data = f.read(MAX_LOG_READ)
        except FileNotFoundError:
            return
        if not data:
            return
        self._log_pos += len(data)
        fields = self._engine.on_log(data, time.time())
        if fields is not None:
            if self._keeper.state_of(self._id) is ServerState.STARTING:
                self._keeper.transition(
                    self._id, ServerState.LOADING, self._engine.label(), **fields
                )
            else:
                self._keeper.update(self._id, **fields)

    def _on_ready(self) -> None:
        now = time.time()
        self._settles_at = time.monotonic() + LEFTOVER_SETTLE
        self._read_progress()
        changes: ServerChanges = {
            **self._engine.on_ready(now),
            "ready_at": now,
            "ready_seconds": round(now - self._started_at, 4),
        }
        self._keeper.transition(
            self._id, ServerState.READY, f"GET {self._spec.ready_path} answered 2xx", **changes
        )
        self._log.info("server_ready", seconds=round(now - self._started_at, 3))

    def _on_exit(self, code: int | None) -> None:
        record = self._keeper.view(self._id)
        when = {
            ServerState.STARTING: "while starting",
            ServerState.LOADING: "while loading",
            ServerState.READY: "after READY",
        }.get(record.state, "")
        how = "exit code unknown" if code is None else describe_exit(code)
        tail = last_lines(self._log_path, LOG_TAIL_LINES)
        self._read_progress()
        failure, fields = self._engine.on_exit(code, tail, (p.pid for p in self._seen))
        # Its monitor kills what a crashed engine leaves behind (schedulers, TP workers).
        changes: ServerChanges = {
            **fields,
            "exit_code": code,
            "finished_at": time.time(),
            "log_tail": tail,
        }
        self._keeper.transition(
            self._id,
            ServerState.FAILED,
            f"exited {when} ({how}): {failure.reason.value}: {failure.line}",
            **changes,
        )
        self._keeper.update(self._id, persist=True, **self._engine.after_stop())
        self._log.warning("server_exited", exit_code=code, during=record.state.value)

    def _on_monitor_gone(self) -> None:
        """No monitor listens: it finished (exit record on disk) or was killed by someone."""
        exit_record = self._monitor.exit_record()
        if exit_record is not None:
            code = exit_record.get("exit_code")
            self._on_exit(code if isinstance(code, int) else self._exit_code)
            return
        killed = kill_orphans(self._seen)
        self._keeper.transition(
            self._id,
            ServerState.FAILED,
            "its monitor vanished without an exit record (killed?)"
            + (f"; killed leftover pids {killed}" if killed else ""),
            exit_code=self._exit_code,
            finished_at=time.time(),
            log_tail=last_lines(self._log_path, LOG_TAIL_LINES),
        )
        self._log.error("monitor_vanished", killed=killed)

    def _wrong_model(self, result: ProbeResult) -> str:
        """Why a server that lists other models than the ready model will never be ready."""
        if not result.wrong_model:
            return ""
        fix = result.hint or "fix the ready model (--ready-model, server.ready.model)"
        return (
            f"the server answers, but does not serve model {self._spec.ready_model!r} "
            f"({result.detail}); {fix}"
        )

    def _fail_when_lasting(self, kind: str, reason: str, now: float, grace: float) -> bool:
        """Fail the server once ``reason`` (a cause the startup timeout would only wait out: a
        wrong ready model, a port other than the probed one) has held ``grace`` seconds."""
        if not reason:
            self._lasting.pop(kind, None)
            return False
        if now - self._lasting.setdefault(kind, now) < grace:
            return False
        self._fail_after_stop = True
        self.request_stop(None, reason)
        return True

    def _on_startup_timeout(self) -> None:
        detail = (
            f"not ready after the {self._spec.startup_timeout:g} s startup timeout "
            f"(last probe: {self._engine.probe_detail()})"
        )
        tail = last_lines(self._log_path, LOG_TAIL_LINES)
        failure, fields = self._engine.on_timeout(tail, detail)
        self._keeper.update(self._id, **fields)
        self._fail_after_stop = True
        self.request_stop(None, f"{detail}: {failure.reason.value}")

    # --- stopping ----------------------------------------------------------------------------

    def _run_stop(self) -> None:
        """Ask the monitor to stop the tree (it runs the ladder, so a stop survives an agent
        restart), wait until it reports the tree gone, then wait for the GPUs to be free."""
        self._wake.clear()
        record = self._keeper.view(self._id)
        if record.state is not ServerState.STOPPING:
            self._keeper.transition(self._id, ServerState.STOPPING, self._stop_reason)
        self._engine.on_scan(p.pid for p in self._seen)
        grace = self._stop_grace if self._stop_grace is not None else self._spec.stop_grace
        status = self._ask_monitor((grace, self._stop_reason))
        escalated = False
        while status is _NO_ANSWER and not self._closing.is_set():
            status = self._ask_monitor((grace, self._stop_reason))
        while isinstance(status, MonitorStatus) and not self._closing.is_set():
            self._track(status)
            escalated = status.escalated
            if status.done:
                break
            if status.kill_failed:
                pids = ", ".join(str(p.pid) for p in sorted(status.tree))
                self._finish(
                    ServerState.KILL_FAILED,
                    f"{self._stop_reason}; pids {pids} survived SIGKILL "
                    f"for {self._settings.kill_timeout:g} s",
                    self._done_updates(),
                )
                return
            self._closing.wait(STOP_POLL)
            status = self._ask_monitor()
            while status is _NO_ANSWER and not self._closing.is_set():
                status = self._ask_monitor()
        if self._closing.is_set():
            return  # the monitor goes on with the stop; the next agent finishes the record
        if status is None:  # the monitor finished: its exit record has the last word
            exit_record = self._monitor.exit_record()
            if exit_record is None:
                self._on_monitor_gone()
                return
            escalated = escalated or bool(exit_record.get("escalated"))
        how = "after SIGKILL" if escalated else "after SIGTERM"
        gpu_note, holders = self._wait_gpu_release(self._seen)
        done = self._done_updates()
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

    def _done_updates(self) -> ServerChanges:
        exit_record = self._monitor.exit_record() or {}
        code = exit_record.get("exit_code", self._exit_code)
        return {
            "exit_code": code if isinstance(code, int) else self._exit_code,
            "log_tail": last_lines(self._log_path, LOG_TAIL_LINES),
        }

    def _finish(self, target: ServerState, message: str, changes: ServerChanges) -> None:
        done: ServerChanges = {**changes, "finished_at": time.time()}
        self._keeper.transition(self._id, target, message, **done)
        self._log.info("server_stopped", state=target.value, detail=message)

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


class Waker:
    """A threading.Event the supervisor can also wait on together with a pidfd (an eventfd):
    ``wait`` returns when it is set, when ``fd`` turns readable, or after ``timeout``."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._closed = False

    def set(self) -> None:
        with self._lock:  # never a write to a closed (and perhaps reused) fd number
            if not self._closed:
                os.eventfd_write(self._fd, 1)

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._fd)

    def wait(self, timeout: float, fd: int | None = None) -> bool:
        """True when it was set (a stop, or shutdown)."""
        fds = [self._fd] if fd is None else [self._fd, fd]
        readable, _, _ = select.select(fds, [], [], timeout)
        return self._fd in readable

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)


class _Silent:
    """A monitor that exists but did not answer in time (asked again later)."""


_NO_ANSWER = _Silent()


def _open_pidfd(leader: ProcessId | None) -> int | None:
    """A pidfd on the leader, opened only if it is still exactly that process."""
    if leader is None or leader.pid <= 1:
        return None
    try:
        fd = os.pidfd_open(leader.pid)
    except OSError:
        return None
    if not leader.alive():
        os.close(fd)
        return None
    return fd


def describe_exit(code: int) -> str:
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
