"""What the statement books (searches.py, slurmbook.py, watches.py) run on: the engine's
transaction, reads, event rows, fence check and the experiment insert they share with the
queue. ``core.SqlStore`` is the one implementation; each book holds it with its own
statements, built once per dialect, so no book re-declares these as stubs of its own.

The names keep their leading underscore: they are the store package's, not its users'.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tunelab.controller.store.models import ExperimentRow, FencingToken


class Engine(Protocol):
    def _tx(self) -> AbstractContextManager[Any]:
        """One write transaction (a connection with ``execute``)."""
        ...

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read."""
        ...

    def _event(
        self, conn: Any, kind: str, ref: str, src: str | None, dst: str | None, msg: str
    ) -> None:
        """An event row, in the caller's transaction."""
        ...

    def _check_fence(self, conn: Any, fence: FencingToken) -> None:
        """In the caller's transaction: StoreFenced once the turn is lost."""
        ...

    def _insert_experiment_rows(self, conn: Any, rows: Sequence[ExperimentRow]) -> None:
        """Experiments and their events, in the caller's transaction."""
        ...

    def _claim_request(self, conn: Any, request_id: str, group: str, now: float) -> str | None:
        """The group an earlier submission with this request id made, or None after
        recording ``group`` as this id's."""
        ...
