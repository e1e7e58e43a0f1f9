"""All servers of this agent: start, look up, stop, watch, and re-adopt after an agent restart.

Every state change goes through :meth:`ServerRegistry.transition`, which checks it against the
state machine, writes the state file atomically, records an event and wakes watchers.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Unpack

import structlog

from tunelab.agent.engines.profiles import profile_for
from tunelab.agent.engines.profiling import ProfilerSetup, profiler_setup
from tunelab.agent.engines.traces import TRACE_DIR
from tunelab.agent.errors import (
    Conflict,
    InvalidSpec,
    NotFound,
    PortInUse,
    Unavailable,
    storage_error,
)
from tunelab.agent.gpu import GpuBackend
from tunelab.agent.logfiles import last_lines
from tunelab.agent.procs.identityproof import carries_server_id
from tunelab.agent.procs.monitorclient import (
    MonitorClient,
    MonitorFailed,
    MonitorStatus,
    kill_orphans,
    launch_monitor,
)
from tunelab.agent.quarantine import QuarantineList
from tunelab.agent.recordbook import RecordBook
from tunelab.agent.servers.ports import port_in_use
from tunelab.agent.servers.record import MAX_EVENTS, ServerChanges, ServerEvent, ServerRecord
from tunelab.agent.servers.spec import MARKER_ENV, SERVER_NAME, ServerSpec, ValidServerSpec
from tunelab.agent.servers.states import ServerState, check_transition
from tunelab.agent.servers.supervisor import ServerSupervisor, SupervisorSettings, describe_exit
from tunelab.agent.statefile import write_json_atomic
from tunelab.agent.statewriter import DurableWriter
from tunelab.agent.watching import watch_versioned
from tunelab.common.redaction import Redactor
from tunelab.common.rpcerrors import shown
from tunelab.common.spawn import with_python

log = structlog.get_logger(__name__)

STATE_FILE = "state.json"
LOG_FILE = "server.log"
FAILPOINT_ENV = "TUNELAB_TEST_FAILPOINT"


class ServerRegistry:
    def __init__(
        self,
        state_dir: Path,
        gpu: GpuBackend,
        settings: SupervisorSettings | None = None,
        writer: DurableWriter | None = None,
        quarantined: QuarantineList | None = None,
    ) -> None:
        self._dir = state_dir / "servers"
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._gpu = gpu
        self._settings = settings or SupervisorSettings()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._supervisors: dict[str, ServerSupervisor] = {}
        self._closed = False
        self._writer = writer or DurableWriter()
        self.quarantined = quarantined if quarantined is not None else QuarantineList()
        self._records: RecordBook[ServerRecord, ServerState, ServerEvent] = RecordBook(
            kind="server",
            id_field="server_id",
            path_of=lambda server_id: self.server_dir(server_id) / STATE_FILE,
            check=check_transition,
            event=ServerEvent,
            max_events=MAX_EVENTS,
            changed=self._changed,
            writer=self._writer,
            quarantined=self.quarantined,
        )

    # --- paths -------------------------------------------------------------------------------

    def server_dir(self, server_id: str) -> Path:
        return self._dir / server_id

    def log_path(self, server_id: str) -> Path:
        return self.server_dir(server_id) / LOG_FILE

    def trace_dir(self, server_id: str) -> Path:
        """Where a server started with ``profile`` has its profiler write (and the agent keep)
        its traces: inside the server's own folder, so they go when that folder goes."""
        return self.server_dir(server_id) / TRACE_DIR

    # --- queries -----------------------------------------------------------------------------

    def _find(self, id_or_name: str) -> ServerRecord:
        if id_or_name in self._records:
            return self._records[id_or_name]
        by_name = [r for r in self._records.values() if r.name == id_or_name]
        live = [r for r in by_name if r.state.is_live()]
        match = live or sorted(by_name, key=lambda r: r.started_at)[-1:]
        if not match:
            raise NotFound(f"no server with id or name {shown(id_or_name)}")
        return match[0]

    def get(self, id_or_name: str) -> ServerRecord:
        with self._lock:
            return self._find(id_or_name).snapshot()

    def view(self, server_id: str) -> ServerRecord:
        return self.get(server_id)

    def state_of(self, server_id: str) -> ServerState:
        """The state alone, without copying the record (the supervisor asks often)."""
        with self._lock:
            return self._records[server_id].state

    def servers(self, include_finished: bool = False) -> list[ServerRecord]:
        with self._lock:
            records = [
                r.snapshot()
                for r in self._records.values()
                if include_finished or r.state.is_live()
            ]
        return sorted(records, key=lambda r: r.started_at)

    def is_finished(self, server_id: str) -> bool:
        with self._lock:
            return self._find(server_id).state.is_terminal()

    # --- start -------------------------------------------------------------------------------

    def start(self, spec: ValidServerSpec, server_id: str = "") -> ServerRecord:
        """Start a server under its own monitor; a known id returns that server (same spec)
        instead of a second one. ``spec`` was validated where it entered (its type says so).

        Intent before effect: the PENDING record is on disk (fsynced) before anything is
        spawned; when it cannot be written nothing is spawned (DiskFull / Unavailable).
        """
        _check_profile(spec)
        if server_id and not SERVER_NAME.match(server_id):
            raise InvalidSpec(
                "id", "expected 1-63 letters, digits, '.', '_' or '-', starting alnum"
            )
        with self._lock:
            if self._closed:
                raise Conflict("the agent is shutting down")
            if server_id in self._records:
                existing = self._records[server_id]
                if existing.spec != spec:
                    raise Conflict(f"server {server_id} exists with a different spec")
                return existing.snapshot()
            server_id = server_id or f"srv-{secrets.token_hex(4)}"
            name = spec.name or server_id
            for other in self._records.values():
                if not other.state.is_live():
                    continue
                if other.name == name:
                    raise Conflict(f"a live server is already named {name!r} ({other.id})")
                if other.spec.port == spec.port:
                    raise PortInUse(f"port {spec.port} belongs to live server {other.id}")
            if port_in_use(spec.port):
                raise PortInUse(f"port {spec.port} is already in use on this host; nothing started")
            cwd = Path(spec.cwd) if spec.cwd else self.server_dir(server_id)
            if spec.cwd and not cwd.is_dir():
                raise InvalidSpec("spec.cwd", f"{spec.cwd} is not a directory")
            now = time.time()
            record = ServerRecord(
                id=server_id,
                spec=spec,
                started_at=now,
                message="accepted; starting its monitor",
                events=[ServerEvent(now, ServerState.PENDING, "accepted")],
            )
            self._write_intent(record)
            self._records.add(server_id, record)
        failpoint("after-intent")
        setup = ProfilerSetup()
        if spec.profile:  # the run path's mechanism (engines.profiling), this server's folder
            engine = profile_for(spec.engine, spec.argv)
            setup = profiler_setup(engine, spec.argv, self.trace_dir(server_id))
            self.trace_dir(server_id).mkdir(mode=0o700, exist_ok=True)
        launch = {
            "argv": with_python((*spec.argv, *setup.argv)),
            "env": {**spec.env, **setup.env, MARKER_ENV: server_id},
            "cwd": str(cwd),
            "log": str(self.log_path(server_id)),
            "spec": spec.to_dict(),
        }
        server_dir = self.server_dir(server_id)
        try:
            monitor_popen, leader = launch_monitor(server_id, server_dir, launch)
        except InvalidSpec:
            with self._lock:
                self._records.remove(server_id)
            shutil.rmtree(server_dir, ignore_errors=True)  # nothing ran: forget it entirely
            raise
        except (MonitorFailed, OSError) as exc:
            self.transition(server_id, ServerState.FAILED, f"could not start its monitor: {exc}")
            raise Unavailable(f"server {server_id}: could not start its monitor: {exc}") from exc
        failpoint("after-spawn")
        with self._records.locked():  # the state and its supervisor together; the file after
            self.transition(
                server_id,
                ServerState.STARTING,
                f"spawned pid {leader.pid} under monitor pid {monitor_popen.pid}",
                pid=leader.pid,
                create_time=leader.create_time,
            )
            record = self._records[server_id]
            supervisor = ServerSupervisor(
                self,
                record,
                self.log_path(server_id),
                self._gpu,
                self._settings,
                MonitorClient(server_dir),
                monitor_popen,
            )
            self._supervisors[server_id] = supervisor
            supervisor.start()
        failpoint("after-record")
        # masked here with the spec's own redact names, which the log's redactor does not know
        argv = Redactor.for_process(spec.argv, spec.env, names=spec.redact).argv(spec.argv)
        log.info("server_started", server_id=server_id, pid=leader.pid, argv=argv)
        return record.snapshot()

    def _write_intent(self, record: ServerRecord) -> None:
        server_dir = self.server_dir(record.id)
        path = server_dir / STATE_FILE
        try:
            server_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_json_atomic(path, record.to_dict())
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
                server_dir.rmdir()
            raise storage_error(exc, path, "nothing was started") from exc

    # --- stop --------------------------------------------------------------------------------

    def stop(
        self, id_or_name: str, grace: float | None = None, wait: float | None = None
    ) -> ServerRecord:
        """Run the stop ladder; returns once the server is terminal or ``wait`` seconds passed."""
        with self._lock:
            record = self._find(id_or_name)
            supervisor = self._supervisors.get(record.id)
            if record.state.is_terminal() or supervisor is None:
                return record.snapshot()
            supervisor.request_stop(grace)
            server_id = record.id
        self.wait_for(server_id, lambda r: r.state.is_terminal(), wait)
        return self.get(server_id)

    def wait_for(
        self, server_id: str, predicate: Callable[[ServerRecord], bool], timeout: float | None
    ) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not predicate(self._records[server_id]):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                # a minute at most per wait (the loop checks the deadline): a far deadline must not
                # overflow threading's wait (issue 36.6)
                self._changed.wait(min(remaining, 60.0) if remaining is not None else 1.0)
        return True

    def watch(self, id_or_name: str, cancelled: Callable[[], bool]) -> Iterator[ServerRecord]:
        """Yield a snapshot now and after every change, until terminal or cancelled."""
        with self._lock:
            record = self._find(id_or_name)
            server_id = record.id
        yield from watch_versioned(self._changed, lambda: self._records[server_id], cancelled)

    # --- the supervisor's side (RecordKeeper) ------------------------------------------------

    def transition(
        self,
        server_id: str,
        target: ServerState,
        message: str,
        **changes: Unpack[ServerChanges],
    ) -> None:
        """Check and make one state change (a misspelt field fails mypy and raises TypeError)."""
        with self._records.locked():
            self._records.transition(server_id, target, message, changes)
            if target.is_terminal():
                self._supervisors.pop(server_id, None)

    def update(
        self, server_id: str, *, persist: bool = False, **changes: Unpack[ServerChanges]
    ) -> None:
        self._records.update(server_id, changes, persist=persist)

    # --- agent start and shutdown ------------------------------------------------------------

    def adopt_existing(self) -> list[str]:
        """Find every server of an earlier agent, by its folder and its monitor's socket.

        A readable record is re-attached to its live monitor; one whose monitor is gone is
        finished with the exit code the monitor wrote. An unreadable record (empty, truncated,
        garbage, wrong types, forged identity, another id) is quarantined — renamed, reported
        in GetInfo and as a metric — and its server is rebuilt from what its monitor knows.
        Returns the ids re-adopted.
        """
        adopted: list[str] = []
        for server_dir in sorted(p for p in self._dir.iterdir() if p.is_dir()):
            if not SERVER_NAME.match(server_dir.name):
                continue
            monitor = MonitorClient(server_dir)
            status = _ask(monitor)
            record = self._load(server_dir)
            if record is None:
                record = recovered_record(server_dir.name, status, monitor.exit_record())
                if record is None:
                    continue
                self._records.add(record.id, record, persist=True)
            else:
                self._records.add(record.id, record)
            if record.state.is_terminal():
                continue
            self._adopt(record, monitor, status)
            if record.id in self._supervisors:
                adopted.append(record.id)
        return adopted

    def _load(self, server_dir: Path) -> ServerRecord | None:
        path = server_dir / STATE_FILE
        if not path.exists():
            if MonitorClient(server_dir).has_socket():
                self.quarantined.add(path, "state file missing beside a monitor socket", None)
            return None
        return self._records.load(path, ServerRecord.from_dict, lambda record: record.id)

    def _adopt(
        self, record: ServerRecord, monitor: MonitorClient, status: MonitorStatus | None
    ) -> None:
        if status is None:
            self._finish_unmonitored(record, monitor)
            return
        if record.state is ServerState.PENDING:
            if status.leader is None:
                self.transition(
                    record.id,
                    ServerState.FAILED,
                    f"its monitor did not start it: {status.spawn_error}",
                )
                return
            self.transition(
                record.id,
                ServerState.STARTING,
                f"spawned pid {status.leader.pid} under monitor pid {status.monitor_pid} "
                "(found after an agent restart)",
                pid=status.leader.pid,
                create_time=status.leader.create_time,
            )
        leader = status.leader
        if leader is not None and record.leader is not None and record.leader.pid != leader.pid:
            log.warning(
                "recorded_pid_differs_from_monitor",
                server_id=record.id,
                recorded=[record.leader.pid, record.leader.create_time],
                monitor=[leader.pid, leader.create_time],
            )
            self.update(record.id, pid=leader.pid, create_time=leader.create_time)
        with self._records.locked():
            adoptions = self._records[record.id].adoptions + 1
            current = self._records.update(record.id, {"adoptions": adoptions}, persist=True)
            supervisor = ServerSupervisor(
                self, current, self.log_path(record.id), self._gpu, self._settings, monitor
            )
            self._supervisors[record.id] = supervisor
        if current.state is ServerState.STOPPING:
            supervisor.request_stop(None, current.message or "stop resumed after agent restart")
        supervisor.start()
        log.info("server_adopted", server_id=record.id, pid=record.pid, state=record.state.value)

    def _finish_unmonitored(self, record: ServerRecord, monitor: MonitorClient) -> None:
        """No monitor answers: it finished (and wrote exit.json), never started, or was killed."""
        tail = last_lines(self.log_path(record.id), 20)
        done: ServerChanges = {"finished_at": time.time(), "log_tail": tail}
        exit_record = monitor.exit_record()
        if exit_record is not None:
            code = exit_record.get("exit_code")
            code = code if isinstance(code, int) else None
            how = "exit code unknown" if code is None else describe_exit(code)
            done["exit_code"] = code
            if record.state is ServerState.STOPPING:
                after = "after SIGKILL" if exit_record.get("escalated") else "after SIGTERM"
                self.transition(
                    record.id,
                    ServerState.STOPPED,
                    f"{record.message}; stopped {after} by its monitor while no agent ran ({how})",
                    **done,
                )
            else:
                self.transition(
                    record.id,
                    ServerState.FAILED,
                    f"exited while the agent was not running ({how})",
                    **done,
                )
            return
        if record.state is ServerState.PENDING:
            self.transition(
                record.id,
                ServerState.FAILED,
                "the agent stopped before the server was spawned; nothing ran",
                **done,
            )
            return
        # the state file is advice: only a process that still carries this server's id is ours
        proven = [p for p in record.process_ids() if carries_server_id(p.pid, record.id)]
        killed = kill_orphans(proven)
        self.transition(
            record.id,
            ServerState.FAILED,
            "its monitor is gone without an exit record (killed?); exit code unknown"
            + (f"; killed leftover pids {killed}" if killed else ""),
            **done,
        )

    def close(self, timeout: float = 5.0) -> None:
        """Stop watching; leave every server (and its monitor) running for the next agent."""
        with self._lock:
            self._closed = True
            supervisors = list(self._supervisors.values())
        for supervisor in supervisors:
            supervisor.close()
        for supervisor in supervisors:
            supervisor.join(timeout)
        self._writer.close()


def _check_profile(spec: ServerSpec) -> None:
    """Refuse a ``profile`` whose traces the agent could not keep."""
    if (
        spec.profile
        and profiler_setup(profile_for(spec.engine, spec.argv), spec.argv, Path()).own_config
    ):
        raise InvalidSpec(
            "spec.profile",
            "the argv has its own --profiler-config, whose traces the agent would not keep: "
            "drop it (the agent adds one) or drop --profile",
        )


def _ask(monitor: MonitorClient) -> MonitorStatus | None:
    """The monitor's status; one that exists but is slow gets a second, longer chance."""
    if not monitor.has_socket():
        return None
    for timeout in (5.0, 15.0):
        try:
            return monitor.status(timeout)
        except OSError:
            continue
    return None


def recovered_record(
    server_id: str, status: MonitorStatus | None, exit_record: dict[str, Any] | None
) -> ServerRecord | None:
    """A record rebuilt from the monitor (live) or its exit record, when the state file was lost."""
    raw_spec = status.spec if status is not None else (exit_record or {}).get("spec")
    if not isinstance(raw_spec, dict):
        return None
    try:
        spec = ServerSpec.from_dict(raw_spec)
    except (ValueError, KeyError, TypeError):
        return None
    now = time.time()
    note = "state file unreadable (quarantined); recovered from its monitor"
    if status is not None and status.leader is not None and not status.exited:
        return ServerRecord(
            id=server_id,
            spec=spec,
            state=ServerState.STARTING,
            pid=status.leader.pid,
            create_time=status.leader.create_time,
            started_at=now,
            message=note,
            descendants=set(status.tree) - {status.leader},
            events=[ServerEvent(now, ServerState.STARTING, note)],
        )
    code = status.exit_code if status is not None else (exit_record or {}).get("exit_code")
    code = code if isinstance(code, int) else None
    how = "exit code unknown" if code is None else describe_exit(code)
    message = f"{note}; it had exited ({how})"
    return ServerRecord(
        id=server_id,
        spec=spec,
        state=ServerState.FAILED,
        exit_code=code,
        started_at=now,
        finished_at=now,
        message=message,
        events=[ServerEvent(now, ServerState.FAILED, message)],
    )


def failpoint(name: str) -> None:
    """Test hook: when ``TUNELAB_TEST_FAILPOINT`` names this step of StartServer, the agent
    SIGKILLs itself there, so tests prove a crash at each step loses nothing. Unset otherwise."""
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
