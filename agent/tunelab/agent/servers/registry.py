"""All servers of this agent: start, look up, stop, watch, and re-adopt after an agent restart.

Every state change goes through :meth:`ServerRegistry.transition`, which checks it against the
state machine, writes the state file atomically, records an event and wakes watchers.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from tunelab.agent.errors import Conflict, InvalidSpec, NotFound, PortInUse
from tunelab.agent.gpu import GpuBackend
from tunelab.agent.logfiles import last_lines
from tunelab.agent.servers import process as proc_mod
from tunelab.agent.servers.record import MAX_EVENTS, ServerEvent, ServerRecord
from tunelab.agent.servers.spec import MARKER_ENV, SERVER_NAME, ServerSpec
from tunelab.agent.servers.states import ServerState, check_transition
from tunelab.agent.servers.supervisor import ServerSupervisor, SupervisorSettings
from tunelab.agent.statefile import read_json, write_json_atomic

log = structlog.get_logger(__name__)

STATE_FILE = "state.json"
LOG_FILE = "server.log"


class ServerRegistry:
    def __init__(
        self,
        state_dir: Path,
        gpu: GpuBackend,
        settings: SupervisorSettings | None = None,
    ) -> None:
        self._dir = state_dir / "servers"
        self._dir.mkdir(parents=True, exist_ok=True)
        self._gpu = gpu
        self._settings = settings or SupervisorSettings()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._records: dict[str, ServerRecord] = {}
        self._supervisors: dict[str, ServerSupervisor] = {}
        self._closed = False

    # --- paths -------------------------------------------------------------------------------

    def server_dir(self, server_id: str) -> Path:
        return self._dir / server_id

    def log_path(self, server_id: str) -> Path:
        return self.server_dir(server_id) / LOG_FILE

    # --- queries -----------------------------------------------------------------------------

    def _find(self, id_or_name: str) -> ServerRecord:
        record = self._records.get(id_or_name)
        if record is not None:
            return record
        by_name = [r for r in self._records.values() if r.name == id_or_name]
        live = [r for r in by_name if r.state.is_live()]
        match = live or sorted(by_name, key=lambda r: r.started_at)[-1:]
        if not match:
            raise NotFound(f"no server with id or name {id_or_name!r}")
        return match[0]

    def get(self, id_or_name: str) -> ServerRecord:
        with self._lock:
            return self._find(id_or_name).snapshot()

    def view(self, server_id: str) -> ServerRecord:
        return self.get(server_id)

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

    def start(self, spec: ServerSpec, server_id: str = "") -> ServerRecord:
        """Spawn a server; a known id returns that server (same spec) instead of a second one."""
        spec = spec.validated()
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
            if proc_mod.port_in_use(spec.port):
                raise PortInUse(f"port {spec.port} is already in use on this host; nothing started")
            cwd = Path(spec.cwd) if spec.cwd else self.server_dir(server_id)
            if spec.cwd and not cwd.is_dir():
                raise InvalidSpec("spec.cwd", f"{spec.cwd} is not a directory")
            self.server_dir(server_id).mkdir(parents=True, exist_ok=True)
            log_path = self.log_path(server_id)
            try:
                popen = proc_mod.spawn(
                    list(spec.argv), {**spec.env, MARKER_ENV: server_id}, cwd, log_path
                )
            except InvalidSpec:
                shutil.rmtree(self.server_dir(server_id), ignore_errors=True)
                raise
            leader = proc_mod.ProcessId.of(popen.pid)
            now = time.time()
            record = ServerRecord(
                id=server_id,
                spec=spec,
                state=ServerState.STARTING,
                pid=popen.pid,
                # a process that already exited has no create time; the supervisor sees the exit
                create_time=leader.create_time if leader else now,
                started_at=now,
                message=f"spawned pid {popen.pid}",
                events=[ServerEvent(now, ServerState.STARTING, f"spawned pid {popen.pid}")],
            )
            self._records[server_id] = record
            self._persist(record)
            supervisor = ServerSupervisor(self, record, log_path, self._gpu, self._settings, popen)
            self._supervisors[server_id] = supervisor
            supervisor.start()
            log.info("server_started", server_id=server_id, pid=popen.pid, argv=list(spec.argv))
            return record.snapshot()

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
                self._changed.wait(remaining if remaining is not None else 1.0)
        return True

    def watch(self, id_or_name: str, cancelled: Callable[[], bool]) -> Iterator[ServerRecord]:
        """Yield a snapshot now and after every change, until terminal or cancelled."""
        with self._lock:
            record = self._find(id_or_name)
            server_id = record.id
            seen = -1
        while not cancelled():
            with self._changed:
                current = self._records[server_id]
                if current.version == seen:
                    self._changed.wait(0.5)
                    continue
                seen = current.version
                snapshot = current.snapshot()
            yield snapshot
            if snapshot.state.is_terminal():
                return

    # --- the supervisor's side (RecordKeeper) ------------------------------------------------

    def transition(self, server_id: str, target: ServerState, message: str, **updates: Any) -> None:
        with self._changed:
            record = self._records[server_id]
            check_transition(record.state, target)
            for key, value in updates.items():
                setattr(record, key, value)
            now = time.time()
            record.state = target
            record.message = message
            record.events.append(ServerEvent(now, target, message))
            del record.events[:-MAX_EVENTS]
            record.version += 1
            self._persist(record)
            if target.is_terminal():
                self._supervisors.pop(server_id, None)
            self._changed.notify_all()
        log.info("server_state", server_id=server_id, state=target.value, detail=message)

    def update(self, server_id: str, *, persist: bool = False, **updates: Any) -> None:
        with self._changed:
            record = self._records[server_id]
            for key, value in updates.items():
                setattr(record, key, value)
            record.version += 1
            if persist:
                self._persist(record)
            self._changed.notify_all()

    def _persist(self, record: ServerRecord) -> None:
        write_json_atomic(self.server_dir(record.id) / STATE_FILE, record.to_dict())

    # --- agent start and shutdown ------------------------------------------------------------

    def adopt_existing(self) -> list[str]:
        """Load every state file; re-attach to servers still alive (same pid and create time).

        Returns the ids re-adopted. Servers whose process vanished while no agent watched are
        marked FAILED; a server that was STOPPING finishes its stop ladder.
        """
        adopted: list[str] = []
        for state_file in sorted(self._dir.glob(f"*/{STATE_FILE}")):
            try:
                record = ServerRecord.from_dict(read_json(state_file))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("state_file_unreadable", path=str(state_file), error=str(exc))
                continue
            with self._lock:
                self._records[record.id] = record
            if record.state.is_terminal():
                continue
            self._adopt(record)
            if record.id in self._supervisors:
                adopted.append(record.id)
        return adopted

    def _adopt(self, record: ServerRecord) -> None:
        leader = record.leader
        alive = leader is not None and leader.alive()
        if record.state is ServerState.PENDING or (
            not alive and record.state is not ServerState.STOPPING
        ):
            self.transition(
                record.id,
                ServerState.FAILED,
                "exited while the agent was not running (exit code unknown)",
                finished_at=time.time(),
                log_tail=last_lines(self.log_path(record.id), 20),
            )
            for leftover in record.descendants:
                leftover.signal(signal.SIGKILL)
            return
        with self._lock:
            self._records[record.id] = replace(record, adoptions=record.adoptions + 1)
            current = self._records[record.id]
            self._persist(current)
            supervisor = ServerSupervisor(
                self, current, self.log_path(record.id), self._gpu, self._settings, popen=None
            )
            self._supervisors[record.id] = supervisor
        if current.state is ServerState.STOPPING:
            supervisor.request_stop(None, current.message or "stop resumed after agent restart")
        supervisor.start()
        log.info("server_adopted", server_id=record.id, pid=record.pid, state=record.state.value)

    def close(self, timeout: float = 5.0) -> None:
        """Stop watching; leave every server running for the next agent to adopt."""
        with self._lock:
            self._closed = True
            supervisors = list(self._supervisors.values())
        for supervisor in supervisors:
            supervisor.close()
        for supervisor in supervisors:
            supervisor.join(timeout)
