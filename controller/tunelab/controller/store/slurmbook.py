"""The store's Slurm statements (migration 9): pools' sbatch settings and one job per attempt.

A mixin of :class:`SqliteStore` (and so of the PostgreSQL store, which shares its statements):
it uses only ``_tx`` and ``_query``, with portable SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from tunelab.controller.states import AttemptState, check_attempt
from tunelab.controller.store.base import StoreConflict


@dataclass(frozen=True)
class SlurmJobRow:
    attempt_id: str
    pool: str
    job_id: str
    submitted_at: float
    slurm_state: str = ""
    slurm_reason: str = ""


def _job(row: Any) -> SlurmJobRow:
    return SlurmJobRow(
        row["attempt_id"],
        row["pool"],
        row["job_id"],
        row["submitted_at"],
        row["slurm_state"],
        row["slurm_reason"],
    )


class SlurmBook(Protocol):
    """What the Slurm path needs of the store, beside :class:`Store`."""

    def set_slurm_pool(self, name: str, config: dict[str, Any]) -> None: ...
    def slurm_pools(self) -> dict[str, dict[str, Any]]: ...
    def slurm_job(self, attempt_id: str) -> SlurmJobRow | None: ...
    def record_slurm_job(
        self, attempt_id: str, pool: str, job_id: str, now: float, message: str
    ) -> None: ...
    def set_slurm_job_state(self, attempt_id: str, state: str, reason: str) -> None: ...


class SlurmStatements:
    def _tx(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def set_slurm_pool(self, name: str, config: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM slurm_pools WHERE name = ?", (name,))
            conn.execute(
                "INSERT INTO slurm_pools (name, config_json) VALUES (?, ?)",
                (name, json.dumps(config, sort_keys=True)),
            )

    def slurm_pools(self) -> dict[str, dict[str, Any]]:
        rows = self._query("SELECT name, config_json FROM slurm_pools")
        return {r["name"]: json.loads(r["config_json"]) for r in rows}

    def slurm_job(self, attempt_id: str) -> SlurmJobRow | None:
        rows = self._query("SELECT * FROM slurm_jobs WHERE attempt_id = ?", (attempt_id,))
        return _job(rows[0]) if rows else None

    def record_slurm_job(
        self, attempt_id: str, pool: str, job_id: str, now: float, message: str
    ) -> None:
        """The job sbatch returned, kept with its attempt, in one transaction with the move
        DISPATCHING → STARTING (the attempt's "acked": Slurm has it)."""
        with self._tx() as conn:
            row = conn.execute("SELECT state FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
            if row is None or row["state"] != AttemptState.DISPATCHING.value:
                raise StoreConflict(f"attempt {attempt_id} is no longer DISPATCHING")
            check_attempt(AttemptState.DISPATCHING, AttemptState.STARTING)
            conn.execute(
                "INSERT INTO slurm_jobs (attempt_id, pool, job_id, submitted_at)"
                " VALUES (?, ?, ?, ?)",
                (attempt_id, pool, job_id, now),
            )
            conn.execute(
                "UPDATE attempts SET state = ?, dispatched_at = ?, acked_at = ?, message = ?"
                " WHERE id = ?",
                (AttemptState.STARTING.value, now, now, message, attempt_id),
            )
            conn.execute(
                "INSERT INTO events (at, kind, ref, from_state, to_state, message)"
                " VALUES (?, 'attempt', ?, ?, ?, ?)",
                (now, attempt_id, "DISPATCHING", "STARTING", message),
            )

    def set_slurm_job_state(self, attempt_id: str, state: str, reason: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE slurm_jobs SET slurm_state = ?, slurm_reason = ? WHERE attempt_id = ?",
                (state, reason, attempt_id),
            )
