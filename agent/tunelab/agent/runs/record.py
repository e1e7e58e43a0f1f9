"""What the agent keeps about one run (``runs/<run_id>/run.json``), and the run's spec."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.states import RunState
from tunelab.agent.servers.spec import ServerSpec, ValidServerSpec

MAX_EVENTS = 500


@dataclass(frozen=True)
class CommandBench:
    """An external benchmark tool: its JSON result file is stored as is."""

    argv: tuple[str, ...]
    result_file: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    """What a run does; its shape (one server source, one benchmark) holds from construction,
    so the wire checks a StartRun once and nothing downstream checks it again."""

    server: ValidServerSpec | None  # started by the run (auto_port: the agent picks one), or
    server_id: str  # an existing READY server, used and left running
    builtin: dict[str, Any] | None  # tunelab.bench BenchConfig.to_dict(); url may hold {port}
    command: CommandBench | None
    max_duration: float  # seconds; 0 = no limit
    experiment: str = ""
    keep_server: bool = False

    def __post_init__(self) -> None:
        if (self.server is None) == (not self.server_id):
            raise InvalidSpec(
                "spec.server", "give a server to start or the server_id of a READY one"
            )
        if (self.builtin is None) == (self.command is None):
            raise InvalidSpec("spec.benchmark", "give a builtin or a command benchmark")
        if not self.max_duration >= 0:
            raise InvalidSpec("spec.max_duration_seconds", "must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server.to_dict() if self.server else None,
            "server_id": self.server_id,
            "builtin": self.builtin,
            "command": (
                {
                    "argv": list(self.command.argv),
                    "result_file": self.command.result_file,
                    "env": self.command.env,
                }
                if self.command
                else None
            ),
            "max_duration": self.max_duration,
            "experiment": self.experiment,
            "keep_server": self.keep_server,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        command = data.get("command")
        return cls(
            server=_run_server(data.get("server")),
            server_id=str(data.get("server_id", "")),
            builtin=data.get("builtin"),
            command=CommandBench(
                tuple(command["argv"]), command["result_file"], dict(command.get("env", {}))
            )
            if command
            else None,
            max_duration=float(data.get("max_duration", 0.0)),
            experiment=str(data.get("experiment", "")),
            keep_server=bool(data.get("keep_server", False)),
        )


def _run_server(data: dict[str, Any] | None) -> ValidServerSpec | None:
    """A run's server spec; port 0 in a file from before ``auto_port`` meant an auto port.
    Valid as written: a run is put on disk only once its spec has passed the wire's check."""
    if not data:
        return None
    spec = ServerSpec.from_dict(data)
    return ValidServerSpec(replace(spec, auto_port=True) if spec.port == 0 else spec)


@dataclass
class RunEvent:
    at: float
    state: RunState
    message: str


class RunChanges(TypedDict, total=False):
    """The fields of a RunRecord that a transition or an update may set (the record book sets
    state, message, events and version itself)."""

    server_id: str
    port: int
    progress: dict[str, Any] | None
    result: dict[str, Any] | None
    finished_at: float
    kill_failed: bool
    cancel_requested: bool
    provenance: dict[str, Any] | None


@dataclass
class RunRecord:
    run_id: str
    spec: RunSpec
    state: RunState = RunState.PENDING
    server_id: str = ""
    port: int = 0
    progress: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    message: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    kill_failed: bool = False
    cancel_requested: bool = False
    events: list[RunEvent] = field(default_factory=list)
    provenance: dict[str, Any] | None = (
        None  # runs/provenance.py, recorded before the server starts
    )
    version: int = 0  # not persisted; watchers wait on it

    def snapshot(self) -> RunRecord:
        return copy.deepcopy(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "spec": self.spec.to_dict(),
            "state": self.state.value,
            "server_id": self.server_id,
            "port": self.port,
            "progress": self.progress,
            "message": self.message,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "kill_failed": self.kill_failed,
            "cancel_requested": self.cancel_requested,
            "provenance": self.provenance,
            "events": [
                {"at": e.at, "state": e.state.value, "message": e.message} for e in self.events
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        return cls(
            run_id=data["run_id"],
            spec=RunSpec.from_dict(data["spec"]),
            state=RunState(data["state"]),
            server_id=str(data.get("server_id", "")),
            port=int(data.get("port", 0)),
            progress=data.get("progress"),
            message=str(data.get("message", "")),
            started_at=float(data.get("started_at", 0.0)),
            finished_at=float(data.get("finished_at", 0.0)),
            kill_failed=bool(data.get("kill_failed", False)),
            cancel_requested=bool(data.get("cancel_requested", False)),
            provenance=data.get("provenance"),
            events=[
                RunEvent(float(e["at"]), RunState(e["state"]), str(e["message"]))
                for e in data.get("events", [])
            ],
        )
