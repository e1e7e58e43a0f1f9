"""What the agent knows about one server, and its on-disk form (``servers/<id>/state.json``)."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from tunelab.agent.engines.progress import LoadProgress
from tunelab.agent.engines.status import EngineStatus
from tunelab.agent.procs.process import ProcessId
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.servers.states import ServerState

MAX_EVENTS = 200


@dataclass
class ServerEvent:
    at: float
    state: ServerState
    message: str


class ServerChanges(TypedDict, total=False):
    """The fields of a ServerRecord that a transition or an update may set (the record book
    sets state, message, events and version itself)."""

    pid: int
    create_time: float
    exit_code: int | None
    progress: LoadProgress | None
    started_at: float
    ready_at: float
    finished_at: float
    ready_seconds: float
    log_tail: list[str]
    descendants: set[ProcessId]
    gpu_check_skipped: bool
    adoptions: int
    engine: EngineStatus


@dataclass
class ServerRecord:
    id: str
    spec: ServerSpec
    state: ServerState = ServerState.PENDING
    pid: int = 0
    create_time: float = 0.0
    exit_code: int | None = None
    progress: LoadProgress | None = None
    started_at: float = 0.0
    ready_at: float = 0.0
    finished_at: float = 0.0
    ready_seconds: float = 0.0
    message: str = ""
    log_tail: list[str] = field(default_factory=list)
    descendants: set[ProcessId] = field(default_factory=set)
    gpu_check_skipped: bool = False
    adoptions: int = 0
    events: list[ServerEvent] = field(default_factory=list)
    engine: EngineStatus = field(default_factory=EngineStatus)  # phases, failure reason (issue 13)
    version: int = 0  # bumped on every change; watchers wait on it (not persisted)

    @property
    def name(self) -> str:
        return self.spec.name or self.id

    @property
    def leader(self) -> ProcessId | None:
        return ProcessId(self.pid, self.create_time) if self.pid else None

    def process_ids(self) -> set[ProcessId]:
        """The leader and every descendant seen: what a stop must end and NVML must not show."""
        ids = set(self.descendants)
        if self.leader is not None:
            ids.add(self.leader)
        return ids

    def snapshot(self) -> ServerRecord:
        return copy.deepcopy(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "spec": self.spec.to_dict(),
            "state": self.state.value,
            "pid": self.pid,
            "create_time": self.create_time,
            "exit_code": self.exit_code,
            "progress": asdict(self.progress) if self.progress else None,
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "finished_at": self.finished_at,
            "ready_seconds": self.ready_seconds,
            "message": self.message,
            "log_tail": self.log_tail,
            "descendants": [[p.pid, p.create_time] for p in sorted(self.descendants)],
            "gpu_check_skipped": self.gpu_check_skipped,
            "adoptions": self.adoptions,
            "events": [
                {"at": e.at, "state": e.state.value, "message": e.message} for e in self.events
            ],
            "engine": self.engine.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerRecord:
        """Parse a state document; ValueError/KeyError/TypeError when it is not one we wrote
        (a forged ``pid: 1`` or a NaN create time is rejected here, never acted on)."""
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            raise TypeError("not a server state document")
        progress = data.get("progress")
        record = cls(
            id=data["id"],
            spec=ServerSpec.from_dict(data["spec"]),
            state=ServerState(data["state"]),
            pid=int(data.get("pid", 0)),
            create_time=float(data.get("create_time", 0.0)),
            exit_code=data.get("exit_code"),
            progress=LoadProgress(**progress) if progress else None,
            started_at=float(data.get("started_at", 0.0)),
            ready_at=float(data.get("ready_at", 0.0)),
            finished_at=float(data.get("finished_at", 0.0)),
            ready_seconds=float(data.get("ready_seconds", 0.0)),
            message=str(data.get("message", "")),
            log_tail=list(data.get("log_tail", [])),
            descendants={ProcessId(int(p), float(t)) for p, t in data.get("descendants", [])},
            gpu_check_skipped=bool(data.get("gpu_check_skipped", False)),
            adoptions=int(data.get("adoptions", 0)),
            events=[
                ServerEvent(float(e["at"]), ServerState(e["state"]), str(e["message"]))
                for e in data.get("events", [])
            ],
            engine=EngineStatus.from_dict(data.get("engine")),
        )
        _check_identity("pid", record.pid, record.create_time)
        for p in record.descendants:
            _check_identity("descendants", p.pid, p.create_time)
        return record


def _check_identity(name: str, pid: int, create_time: float) -> None:
    if pid == 0:
        return
    if pid <= 1 or not math.isfinite(create_time) or create_time <= 0:
        raise ValueError(f"{name}: pid {pid} with create time {create_time} is not a server's")
