"""The searches' transactions (migration 0006, ``0006_searches.sql``), held by
``core.SqlStore`` (composed, not mixed in) so both engines have them; their statements are built once per dialect in
``SearchSql`` (as ``statements.py`` builds the rest), so nothing rewrites SQL text per call.

States are data, in ``states.py`` (``SearchState``, ``TrialState`` and their moves). Every
change is a compare-and-set on the state with an event row in the same transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

from tunelab.analysis.evidence import Phase
from tunelab.controller.states import (
    SearchState,
    TransitionError,
    TrialState,
    check_search,
    check_trial,
)
from tunelab.controller.store.base import StoreConflict, StoreNotFound
from tunelab.controller.store.dialect import Dialect
from tunelab.controller.store.engine import Engine
from tunelab.controller.store.models import ExperimentRow, FencingToken
from tunelab.controller.store.search_models import SearchRow, TrialRow


def _moved(current: StrEnum, target: StrEnum, check: Callable[[Any, Any], None], what: str) -> None:
    """The move's check (states.py): a move out of the table means another writer ended the
    row first (StoreConflict: the caller re-reads), since ours only ever end a RUNNING one."""
    try:
        check(current, target)
    except TransitionError:
        raise StoreConflict(f"{what} is {current}; it cannot become {target}") from None


TRIAL_COLUMNS = (
    "grp, number, params_json, rung, experiment_id, state, objective, samples_json, "
    "details_json, failure_reason, created_at, finished_at, phase, race_round, load_axis, "
    "load_value, slo_ratios_json, host, gpu_seconds"
)


class SearchSql:
    """The searches' statements for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        p = dialect.mark
        self.insert_search = (
            "INSERT INTO searches (grp, name, state, spec_json, base_json, message, "
            f"submitted_at) VALUES ({dialect.marks(7)})"
        )
        self.get_search = f"SELECT * FROM searches WHERE grp = {p}"
        self.running = "SELECT * FROM searches WHERE state = 'RUNNING' ORDER BY submitted_at"
        self.trials = f"SELECT * FROM search_trials WHERE grp = {p} ORDER BY number"
        self.search_state = f"SELECT state FROM searches WHERE grp = {p}"
        self.insert_trial = (
            f"INSERT INTO search_trials ({TRIAL_COLUMNS}) VALUES ({dialect.marks(19)})"
        )
        self.trial_state = f"SELECT state FROM search_trials WHERE grp = {p} AND number = {p}"
        self.finish_trial = (
            f"UPDATE search_trials SET state = {p}, objective = {p}, samples_json = {p}, "
            f"details_json = {p}, failure_reason = {p}, finished_at = {p}, load_axis = {p}, "
            f"load_value = {p}, slo_ratios_json = {p}, host = {p}, gpu_seconds = {p} "
            f"WHERE grp = {p} AND number = {p} AND state = 'RUNNING'"
        )
        self.finish_search = (
            f"UPDATE searches SET state = {p}, message = {p}, finished_at = {p} "
            f"WHERE grp = {p} AND state = 'RUNNING'"
        )
        self.cancel_search = (
            f"UPDATE searches SET cancel_requested = 1 WHERE grp = {p} AND state = 'RUNNING'"
        )
        self.all_trial_details = "SELECT grp, number, details_json FROM search_trials"
        self.set_evidence = (
            f"UPDATE search_trials SET phase = {p}, race_round = {p}, load_axis = {p}, "
            f"load_value = {p}, slo_ratios_json = {p}, host = {p}, gpu_seconds = {p} "
            f"WHERE grp = {p} AND number = {p}"
        )
        self.dialect = dialect

    def taken_numbers(self, n: int) -> str:
        return (
            f"SELECT number FROM search_trials WHERE grp = {self.dialect.mark} "
            f"AND number IN ({self.dialect.marks(n)})"
        )


def _search(row: Any) -> SearchRow:
    return SearchRow(
        group=row["grp"],
        name=row["name"],
        state=SearchState(row["state"]),
        spec=json.loads(row["spec_json"]),
        base=json.loads(row["base_json"]),
        submitted_at=row["submitted_at"],
        message=row["message"],
        cancel_requested=bool(row["cancel_requested"]),
        finished_at=row["finished_at"],
    )


def _trial(row: Any) -> TrialRow:
    return TrialRow(
        group=row["grp"],
        number=row["number"],
        params=json.loads(row["params_json"]),
        state=TrialState(row["state"]),
        created_at=row["created_at"],
        rung=row["rung"],
        experiment_id=row["experiment_id"],
        objective=row["objective"],
        samples=json.loads(row["samples_json"]),
        details=json.loads(row["details_json"]),
        failure_reason=row["failure_reason"],
        finished_at=row["finished_at"],
        phase=row["phase"],
        race_round=row["race_round"],
        load=(row["load_axis"], row["load_value"]) if row["load_axis"] else None,
        slo_ratios=json.loads(row["slo_ratios_json"]),
        host=row["host"],
        gpu_seconds=row["gpu_seconds"],
    )


def _evidence(t: TrialRow) -> tuple[Any, ...]:
    """The evidence columns written when a trial ends (migration 0009)."""
    axis, value = t.load if t.load is not None else ("", None)
    return (axis, value, json.dumps(t.slo_ratios, sort_keys=True), t.host, t.gpu_seconds)


def evidence_of_details(details: Any) -> tuple[Any, ...]:
    """Migration 9's reading of an older row's details: (phase, race round, load axis, load
    value, SLO ratios JSON, host, GPU-seconds); whatever it cannot read stays at its default."""
    d = details if isinstance(details, dict) else {}
    drift, race = d.get("drift"), d.get("race")
    phase = {"start": "drift_start", "end": "drift_end"}.get(str(drift), "")
    if not phase:
        phase = "effect" if d.get("effect") else ("race" if race else "strategy")
    race_round = race if isinstance(race, int) and not isinstance(race, bool) else 0
    axis, value = "", None
    load = d.get("load")
    load = load if isinstance(load, dict) else {}
    for name in ("concurrency", "rate"):
        found = load.get(name)
        if isinstance(found, int | float) and not isinstance(found, bool):
            axis, value = name, float(found)
            break
    margins = d.get("slo_margins")
    ratios = {
        str(k): round(1.0 - float(m), 6)
        for k, m in (margins.items() if isinstance(margins, dict) else ())
        if isinstance(m, int | float) and not isinstance(m, bool)
    }
    seconds = d.get("gpu_seconds")
    gpu = float(seconds) if isinstance(seconds, int | float) else None
    host = str(d.get("host") or "")
    return phase, race_round, axis, value, json.dumps(ratios, sort_keys=True), host, gpu


def carry_launch_evidence(conn: Any, sql: SearchSql) -> None:
    """Migration 9's step, after its SQL: the evidence kept in older rows' details becomes
    columns."""
    rows = conn.execute(sql.all_trial_details, ()).fetchall()
    for row in rows:
        found = evidence_of_details(json.loads(row["details_json"]))
        conn.execute(sql.set_evidence, (*found, row["grp"], row["number"]))


class SearchStatements:
    """The searches' transactions, run on ``engine`` (engine.py) with its dialect's
    ``SearchSql``; ``core.SqlStore`` holds one and forwards its search methods to it."""

    def __init__(self, engine: Engine, sql: SearchSql) -> None:
        self._engine = engine
        self.search_sql = sql

    def insert_search(self, row: SearchRow, request_id: str = "") -> str:
        """Keep a submitted search; returns its group. With a client's ``request_id`` that an
        earlier submission already used, nothing is written and that submission's group is
        returned (a retry after a lost answer starts no second search)."""
        with self._engine._tx() as conn:
            earlier = self._engine._claim_request(conn, request_id, row.group, row.submitted_at)
            if earlier is not None:
                return earlier
            conn.execute(
                self.search_sql.insert_search,
                (
                    row.group,
                    row.name,
                    SearchState(row.state).value,
                    json.dumps(row.spec, sort_keys=True),
                    json.dumps(row.base),  # unsorted: server flags keep the user's order
                    row.message,
                    row.submitted_at,
                ),
            )
            self._engine._event(
                conn, "search", row.group, None, SearchState(row.state).value, "submitted"
            )
        return row.group

    def get_search(self, group: str) -> SearchRow | None:
        rows = self._engine._query(self.search_sql.get_search, (group,))
        return _search(rows[0]) if rows else None

    def running_searches(self) -> list[SearchRow]:
        rows = self._engine._query(self.search_sql.running)
        return [_search(r) for r in rows]

    def search_trials(self, group: str) -> list[TrialRow]:
        rows = self._engine._query(self.search_sql.trials, (group,))
        return [_trial(r) for r in rows]

    def add_trials(
        self,
        trials: Sequence[TrialRow],
        experiments: Sequence[ExperimentRow],
        fence: FencingToken,
    ) -> None:
        """New trials and their experiments in one transaction: a trial is queued exactly once
        (a second writer of the same numbers fails on the primary key and writes nothing), and
        only while ``fence`` (the scheduling turn the search step runs in) still holds."""
        if not trials:
            return
        with self._engine._tx() as conn:
            self._engine._check_fence(conn, fence)
            group = trials[0].group
            state = conn.execute(self.search_sql.search_state, (group,)).fetchone()
            if state is None or state["state"] != SearchState.RUNNING.value:
                raise StoreConflict(f"search {group} is not running")
            taken = conn.execute(
                self.search_sql.taken_numbers(len(trials)), (group, *[t.number for t in trials])
            ).fetchall()
            if taken:
                raise StoreConflict(f"search {group}: trial numbers taken meanwhile")
            self._engine._insert_experiment_rows(conn, experiments)
            for values in [
                (
                    t.group,
                    t.number,
                    json.dumps(t.params, sort_keys=True),
                    t.rung,
                    t.experiment_id,
                    TrialState(t.state).value,
                    t.objective,
                    json.dumps(t.samples),
                    json.dumps(t.details, sort_keys=True),
                    t.failure_reason,
                    t.created_at,
                    t.finished_at,
                    Phase(t.phase).value,
                    t.race_round,
                    *_evidence(t)[:2],
                    *_evidence(t)[2:],
                )
                for t in trials
            ]:  # one statement each: never a batch left open on the wire (core._insert_rows)
                conn.execute(self.search_sql.insert_trial, values)
            for t in trials:
                message = f"trial {t.number}: {t.params}"
                self._engine._event(conn, "search", group, None, TrialState(t.state).value, message)

    def finish_trial(self, trial: TrialRow, fence: FencingToken) -> None:
        """A running trial's outcome, written once (compare-and-set on RUNNING), while
        ``fence`` holds."""
        with self._engine._tx() as conn:
            self._engine._check_fence(conn, fence)
            current = conn.execute(
                self.search_sql.trial_state, (trial.group, trial.number)
            ).fetchone()
            if current is None:
                raise StoreNotFound(f"{trial.group} trial {trial.number}")
            was = TrialState(current["state"])
            target = TrialState(trial.state)
            _moved(was, target, check_trial, f"trial {trial.number}")
            conn.execute(
                self.search_sql.finish_trial,
                (
                    target.value,
                    trial.objective,
                    json.dumps(trial.samples),
                    json.dumps(trial.details, sort_keys=True),
                    trial.failure_reason,
                    trial.finished_at,
                    *_evidence(trial),
                    trial.group,
                    trial.number,
                ),
            )
            self._engine._event(
                conn,
                "search",
                trial.group,
                was.value,
                target.value,
                f"trial {trial.number}: {trial.failure_reason or trial.objective}",
            )

    def finish_search(
        self, group: str, state: SearchState, message: str, now: float, fence: FencingToken
    ) -> SearchRow:
        """A running search's end, written once, while ``fence`` holds."""
        with self._engine._tx() as conn:
            self._engine._check_fence(conn, fence)
            current = conn.execute(self.search_sql.search_state, (group,)).fetchone()
            if current is None:
                raise StoreNotFound(f"no search {group}")
            was = SearchState(current["state"])
            target = SearchState(state)
            _moved(was, target, check_search, f"search {group}")
            conn.execute(self.search_sql.finish_search, (target.value, message, now, group))
            self._engine._event(conn, "search", group, was.value, target.value, message)
        found = self.get_search(group)
        if found is None:
            raise StoreNotFound(f"no search {group}")
        return found

    def request_search_cancel(self, group: str) -> SearchRow | None:
        with self._engine._tx() as conn:
            n = conn.execute(self.search_sql.cancel_search, (group,)).rowcount
            if n:
                self._engine._event(conn, "search", group, None, None, "cancel requested")
        return self.get_search(group)
