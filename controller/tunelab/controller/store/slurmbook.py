"""The store's Slurm statements (migration 7): pools' sbatch settings and one job per attempt.

Held by ``core.SqlStore`` (composed, not mixed in) so both engines have them; their statements
are built once per dialect in ``SlurmSql`` (as ``statements.py`` and ``searches.SearchSql``
build the rest), so nothing rewrites SQL text per call. They run on the store's engine
(engine.py: ``_tx``, ``_query``, ``_event``, the fence check)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from tunelab.controller.states import AttemptState, check_attempt
from tunelab.controller.store.base import StoreConflict
from tunelab.controller.store.dialect import Dialect
from tunelab.controller.store.engine import Engine
from tunelab.controller.store.models import FencingToken


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
        self,
        attempt_id: str,
        pool: str,
        job_id: str,
        now: float,
        message: str,
        fence: FencingToken | None,
    ) -> None: ...
    def set_slurm_job_state(
        self, attempt_id: str, state: str, reason: str, fence: FencingToken
    ) -> None: ...


class SlurmSql:
    """The Slurm statements for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        p = dialect.mark
        self.delete_pool = f"DELETE FROM slurm_pools WHERE name = {p}"
        self.insert_pool = f"INSERT INTO slurm_pools (name, config_json) VALUES ({p}, {p})"
        self.pools = "SELECT name, config_json FROM slurm_pools"
        self.job = f"SELECT * FROM slurm_jobs WHERE attempt_id = {p}"
        self.attempt_state = f"SELECT state FROM attempts WHERE id = {p}"
        self.insert_job = (
            "INSERT INTO slurm_jobs (attempt_id, pool, job_id, submitted_at) "
            f"VALUES ({dialect.marks(4)})"
        )
        self.start_attempt = (  # compare-and-set on DISPATCHING
            f"UPDATE attempts SET state = {p}, dispatched_at = {p}, acked_at = {p}, message = {p} "
            f"WHERE id = {p} AND state = {p}"
        )
        self.set_job_state = (
            f"UPDATE slurm_jobs SET slurm_state = {p}, slurm_reason = {p} WHERE attempt_id = {p}"
        )


class SlurmStatements:
    """The Slurm transactions, run on ``engine`` (engine.py) with its dialect's
    ``SlurmSql``; ``core.SqlStore`` holds one and forwards its Slurm methods to it."""

    def __init__(self, engine: Engine, sql: SlurmSql) -> None:
        self._engine = engine
        self.slurm_sql = sql

    def set_slurm_pool(self, name: str, config: dict[str, Any]) -> None:
        with self._engine._tx() as conn:
            conn.execute(self.slurm_sql.delete_pool, (name,))
            conn.execute(self.slurm_sql.insert_pool, (name, json.dumps(config, sort_keys=True)))

    def slurm_pools(self) -> dict[str, dict[str, Any]]:
        rows = self._engine._query(self.slurm_sql.pools)
        return {r["name"]: json.loads(r["config_json"]) for r in rows}

    def slurm_job(self, attempt_id: str) -> SlurmJobRow | None:
        rows = self._engine._query(self.slurm_sql.job, (attempt_id,))
        return _job(rows[0]) if rows else None

    def record_slurm_job(
        self,
        attempt_id: str,
        pool: str,
        job_id: str,
        now: float,
        message: str,
        fence: FencingToken | None,
    ) -> None:
        """The job sbatch returned, kept with its attempt, in one transaction with the move
        DISPATCHING → STARTING (the attempt's "acked": Slurm has it). ``fence``: the turn of
        the Slurm step that writes it (StoreFenced once lost), or None for a job's own report
        (no turn: the compare-and-set on DISPATCHING guards it)."""
        dispatching, starting = AttemptState.DISPATCHING, AttemptState.STARTING
        with self._engine._tx() as conn:
            if fence is not None:
                self._engine._check_fence(conn, fence)
            row = conn.execute(self.slurm_sql.attempt_state, (attempt_id,)).fetchone()
            if row is None or row["state"] != dispatching.value:
                raise StoreConflict(f"attempt {attempt_id} is no longer DISPATCHING")
            check_attempt(dispatching, starting)
            conn.execute(self.slurm_sql.insert_job, (attempt_id, pool, job_id, now))
            conn.execute(
                self.slurm_sql.start_attempt,
                (starting.value, now, now, message, attempt_id, dispatching.value),
            )
            self._engine._event(
                conn, "attempt", attempt_id, dispatching.value, starting.value, message
            )

    def set_slurm_job_state(
        self, attempt_id: str, state: str, reason: str, fence: FencingToken
    ) -> None:
        """What Slurm's queue says of the job, while ``fence`` (the Slurm step's turn) holds."""
        with self._engine._tx() as conn:
            self._engine._check_fence(conn, fence)
            conn.execute(self.slurm_sql.set_job_state, (state, reason, attempt_id))
