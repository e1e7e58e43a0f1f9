"""Following experiments on a terminal: a live table (rich), or one line per change.

Nothing is cut: a failure reason is the cause a person needs, so rich wraps it to the terminal's
width instead. While the controller does not answer, the view says "reconnecting" with the
reason rather than leaving the last state on screen as if it were current.
"""

from __future__ import annotations

import json
import re
import sys
import time
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tunelab.common.textwidth import wrapped
from tunelab.v1 import controller_pb2

Row = tuple[str, str, str, str, str]


def describe(e: controller_pb2.Experiment) -> Row:
    """(id, name, state, host, detail) of an experiment as it is now."""
    state = controller_pb2.ExperimentState.Name(e.state).removeprefix("EXPERIMENT_STATE_")
    attempt = e.attempts[-1] if e.attempts else None
    where = attempt.host if attempt else "-"
    detail = e.message
    if attempt is not None:
        astate = controller_pb2.AttemptState.Name(attempt.state).removeprefix("ATTEMPT_STATE_")
        detail = f"{astate}: {attempt.message}" if attempt.message else astate
        progress = json.loads(attempt.progress_json) if attempt.progress_json else None
        if progress and astate == "BENCHMARKING":
            detail = (
                f"point {progress['point_index'] + 1}/{progress['point_count']} "
                f"c={progress['concurrency']}: {progress['requests_done']}/"
                f"{progress['requests_total'] or '?'} req, "
                f"{progress['output_tokens_per_second']:.0f} tok/s"
            )
    return e.id, e.name, state, where, detail


def _repeated(row: Row) -> Row:
    """What makes a plain line news: a queued experiment's wait reason counts its host's failed
    polls, so its numbers are left out (one line per reason, not one per poll)."""
    if row[2] != "QUEUED":
        return row
    return (*row[:4], re.sub(r"\d+", "N", row[4]))


class ExperimentsView:
    def __init__(self, enabled: bool, plain: bool = True) -> None:
        self._enabled = enabled
        self._plain = plain and not enabled
        self._rows: dict[str, Row] = {}
        self._said: dict[str, Row] = {}  # what the plain lines said last, per experiment
        self._live: Live | None = None
        self._trouble: str | None = None
        self._trouble_since = 0.0

    def __enter__(self) -> ExperimentsView:
        if self._enabled:
            self._live = Live(self._render(), console=Console(stderr=True), refresh_per_second=4)
            self._live.start()
        return self

    def _render(self) -> Table | Group:
        table = Table(show_header=True, header_style="bold")
        for column in ("id", "experiment", "state", "host"):
            table.add_column(column, no_wrap=True)
        table.add_column("detail", overflow="fold")
        for row in self._rows.values():
            table.add_row(*row)
        if self._trouble is None:
            return table
        since = time.monotonic() - self._trouble_since
        note = Text(f"reconnecting ({since:.0f}s): {self._trouble}", style="yellow")
        return Group(table, note)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def update(self, experiment: controller_pb2.Experiment) -> None:
        row = describe(experiment)
        self._rows[experiment.id] = row
        self._refresh()
        said = _repeated(row)
        if self._plain and self._said.get(experiment.id) != said:
            self._said[experiment.id] = said
            print(wrapped("  ".join(row), "", "    "), flush=True)

    def reconnecting(self, reason: str) -> None:
        """The watch broke: the rows shown are the last known, not current."""
        if self._trouble is None:
            self._trouble_since = time.monotonic()
            if self._plain:
                print(
                    wrapped(f"tunelab: reconnecting to the controller: {reason}"), file=sys.stderr
                )
        self._trouble = reason
        self._refresh()

    def connected(self) -> None:
        if self._trouble is not None and self._plain:
            print("tunelab: reconnected to the controller", file=sys.stderr)
        self._trouble = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
