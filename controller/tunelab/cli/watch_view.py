"""Following experiments on a terminal: a live table (rich), or one line per change."""

from __future__ import annotations

import json
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tunelab.v1 import controller_pb2


def _describe(e: controller_pb2.Experiment) -> tuple[str, str, str, str]:
    state = controller_pb2.ExperimentState.Name(e.state).removeprefix("EXPERIMENT_STATE_")
    attempt = e.attempts[-1] if e.attempts else None
    where = attempt.host if attempt else "-"
    detail = e.message
    if attempt is not None:
        astate = controller_pb2.AttemptState.Name(attempt.state).removeprefix("ATTEMPT_STATE_")
        detail = f"{astate}: {attempt.message}"[:70]
        progress = json.loads(attempt.progress_json) if attempt.progress_json else None
        if progress and astate == "BENCHMARKING":
            detail = (
                f"point {progress['point_index'] + 1}/{progress['point_count']} "
                f"c={progress['concurrency']}: {progress['requests_done']}/"
                f"{progress['requests_total'] or '?'} req, "
                f"{progress['output_tokens_per_second']:.0f} tok/s"
            )
    return e.name, state, where, detail


class ExperimentsView:
    def __init__(self, enabled: bool, plain: bool = True) -> None:
        self._enabled = enabled
        self._plain = plain and not enabled
        self._rows: dict[str, tuple[str, str, str, str]] = {}
        self._live: Live | None = None

    def __enter__(self) -> ExperimentsView:
        if self._enabled:
            self._live = Live(self._table(), console=Console(stderr=True), refresh_per_second=4)
            self._live.start()
        return self

    def _table(self) -> Table:
        table = Table(show_header=True, header_style="bold")
        for column in ("experiment", "state", "host", "detail"):
            table.add_column(column)
        for row in self._rows.values():
            table.add_row(*row)
        return table

    def update(self, experiment: controller_pb2.Experiment) -> None:
        row = _describe(experiment)
        changed = self._rows.get(experiment.id) != row
        self._rows[experiment.id] = row
        if self._live is not None:
            self._live.update(self._table())
        elif self._plain and changed:
            print(f"{row[0]}  {row[1]}  {row[2]}  {row[3]}", flush=True)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
