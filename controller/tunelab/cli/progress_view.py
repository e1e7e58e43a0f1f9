"""Live terminal views for long waits (rich); silent when output is not a terminal or is JSON."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from tunelab.v1 import server_pb2


class ServerProgressView:
    """The server's state and start-up phase as the label; a bar (done/total, ETA) while the
    engine prints one for the current phase, else a pulsing bar with the time in the phase."""

    def __init__(self, enabled: bool, console: Console | None = None) -> None:
        self._enabled = enabled
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ServerProgressView:
        if self._enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self._console or Console(stderr=True),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("STARTING", total=None)
        return self

    def update(self, server: server_pb2.Server) -> None:
        if self._progress is None or self._task is None:
            return
        if server.state == server_pb2.SERVER_STATE_READY:
            # the last bar ends full (83/83), not back at 0/83 under a READY label
            task = self._progress.tasks[self._task]
            total = task.total or 1
            ready = f"READY in {server.ready_seconds:.1f} s" if server.ready_seconds else "READY"
            self._progress.update(self._task, description=ready, total=total, completed=total)
            return
        self._progress.update(self._task, **progress_fields(server, time.time()))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()


def progress_fields(server: server_pb2.Server, now: float) -> dict[str, Any]:
    """What the bar shows for one server update: a phase with a bar of its own gets done/total;
    a phase without one (compiling, warming up) gets total=None (pulsing) and its elapsed time."""
    state = server_pb2.ServerState.Name(server.state).removeprefix("SERVER_STATE_")
    phase = server_pb2.ServerPhase.Name(server.phase).removeprefix("SERVER_PHASE_")
    label = state if not server.phase else f"{state:<8} {phase.lower().replace('_', ' ')}"
    bar = server.progress if server.HasField("progress") else None
    if bar is not None and bar.total and (bar.phase == server.phase or not server.phase):
        return {"description": f"{label}: {bar.label}", "total": bar.total, "completed": bar.done}
    if server.phase_started_at and server.state in (
        server_pb2.SERVER_STATE_STARTING,
        server_pb2.SERVER_STATE_LOADING,
    ):
        label += f" ({max(0.0, now - server.phase_started_at):.0f} s)"
    return {"description": label, "total": None, "completed": 0}
