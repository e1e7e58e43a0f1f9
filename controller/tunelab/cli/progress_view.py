"""Live terminal views for long waits (rich); silent when output is not a terminal or is JSON."""

from __future__ import annotations

from types import TracebackType

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
    """A bar of shards loaded (done/total, ETA) with the server's state as its label."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ServerProgressView:
        if self._enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("STARTING", total=None)
        return self

    def update(self, server: server_pb2.Server) -> None:
        if self._progress is None or self._task is None:
            return
        state = server_pb2.ServerState.Name(server.state).removeprefix("SERVER_STATE_")
        label = f"{state:<8} {server.progress.label}" if server.HasField("progress") else state
        if server.HasField("progress") and server.progress.total:
            self._progress.update(
                self._task,
                description=label,
                total=server.progress.total,
                completed=server.progress.done,
            )
        else:
            self._progress.update(self._task, description=label)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
