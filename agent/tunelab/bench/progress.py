"""The bench process's progress file: JSON lines appended as it runs, read by whoever watches.

It is a file, not a pipe, so the watcher (the agent, the CLI) can go away and come back: a new
reader tails it from the start and ends up with the same latest state. Event kinds:

- ``progress``: a :class:`PointProgress` snapshot (about twice a second while a point runs);
- ``point_done``: a point finished (its index and headline figures);
- ``finished``: the result file is complete; ``failed``: the run stopped, with ``error``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, TypedDict, Unpack

PROGRESS_INTERVAL = 0.5


@dataclass(frozen=True)
class PointProgress:
    """Where the sweep is; the run-wide totals feed the agent's live Prometheus counters."""

    point_index: int  # 0-based
    point_count: int
    concurrency: int  # 0 for an open loop
    request_rate: float  # 0 for a closed loop
    phase: str  # warmup | measure | done
    requests_done: int  # measured requests finished at this point (ok or failed)
    requests_total: int  # 0 when the point is bounded by duration
    errors: int  # measured requests failed at this point
    output_tokens_per_second: float  # measured output tokens / elapsed, live
    elapsed_seconds: float  # since the measured phase of this point began
    output_tokens_total: int = 0  # every token streamed in the run so far, warm-up included
    requests_by_outcome: dict[str, int] = field(default_factory=dict)  # run-wide, "ok" + kinds
    at: float = 0.0  # wall-clock time of the snapshot
    planned_seconds: float = 0.0  # when the point's last request is due (timed trace, counted
    # open loop), from the start of its measured phase; 0 when no schedule says
    schedule_unit: str = ""  # a timed trace: how its timestamps were read ("timestamps in ms")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PointProgress:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


class EventFields(TypedDict, total=False):
    """What a ``point_done``, ``finished`` or ``failed`` line carries besides ``event``."""

    at: float
    point_index: int  # point_done: the point, and its headline figures
    completed: int
    failed: int
    output_throughput: float
    client_saturated: bool
    client_starved: bool
    points: int  # finished: how many points the result holds
    error: str  # failed: why the run stopped


class ProgressWriter:
    """Appends events, one line each, flushed at once (the watcher may read at any moment)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def event(self, kind: str, **fields: Unpack[EventFields]) -> None:
        self._append(kind, dict(fields))

    def progress(self, snapshot: PointProgress) -> None:
        self._append("progress", asdict(snapshot))

    def _append(self, kind: str, data: dict[str, object]) -> None:
        data["event"] = kind
        data.setdefault("at", time.time())
        self._file.write(json.dumps(data, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@dataclass
class ProgressState:
    """Everything learnt from the file so far."""

    latest: PointProgress | None = None
    points_done: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    error: str | None = None


class ProgressReader:
    """Tails a progress file: each :meth:`poll` consumes the complete lines added since the last."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.state = ProgressState()

    def poll(self) -> ProgressState:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.state
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill; the next snapshot supersedes it
            if isinstance(event, dict):
                self._apply(event)
        return self.state

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.pop("event", "")
        if kind == "progress":
            self.state.latest = PointProgress.from_dict(event)
        elif kind == "point_done":
            self.state.points_done.append(event)
        elif kind == "finished":
            self.state.finished = True
        elif kind == "failed":
            self.state.error = str(event.get("error", "failed"))
