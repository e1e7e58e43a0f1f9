"""The store's surface for searches, Slurm jobs, watches and step faults: ``core.SqlStore``
holds one object of statements for each (``searches``, ``slurm``, ``watches``, ``faults``:
composed over the store's engine, engine.py) and these methods forward to them, so callers
keep one store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tunelab.analysis.noise import NoiseProfile, ProfileKey
from tunelab.controller.states import SearchState
from tunelab.controller.store.faults import FaultStatements, StepFault
from tunelab.controller.store.models import ExperimentRow, FencingToken
from tunelab.controller.store.noisebook import NoiseStatements
from tunelab.controller.store.search_models import SearchRow, TrialRow
from tunelab.controller.store.searches import SearchStatements
from tunelab.controller.store.slurmbook import SlurmJobRow, SlurmStatements
from tunelab.controller.store.timelinebook import TimelineStatements
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow
from tunelab.controller.store.watches import PAGE_LIMIT, WatchStatements


class StatementBooks:
    """Set by each engine when it opens, with its dialect's statements."""

    searches: SearchStatements
    slurm: SlurmStatements
    watches: WatchStatements
    faults: FaultStatements
    timelines: TimelineStatements
    noise: NoiseStatements

    # --- searches (searches.py) --------------------------------------------------------------

    def insert_search(self, row: SearchRow, request_id: str = "") -> str:
        return self.searches.insert_search(row, request_id)

    def get_search(self, group: str) -> SearchRow | None:
        return self.searches.get_search(group)

    def running_searches(self) -> list[SearchRow]:
        return self.searches.running_searches()

    def search_trials(self, group: str) -> list[TrialRow]:
        return self.searches.search_trials(group)

    def add_trials(
        self, trials: Sequence[TrialRow], experiments: Sequence[ExperimentRow], fence: FencingToken
    ) -> None:
        self.searches.add_trials(trials, experiments, fence)

    def finish_trial(self, trial: TrialRow, fence: FencingToken) -> None:
        self.searches.finish_trial(trial, fence)

    def finish_search(
        self, group: str, state: SearchState, message: str, now: float, fence: FencingToken
    ) -> SearchRow:
        return self.searches.finish_search(group, state, message, now, fence)

    def request_search_cancel(self, group: str) -> SearchRow | None:
        return self.searches.request_search_cancel(group)

    # --- Slurm (slurmbook.py) ----------------------------------------------------------------

    def set_slurm_pool(self, name: str, config: dict[str, Any]) -> None:
        self.slurm.set_slurm_pool(name, config)

    def slurm_pools(self) -> dict[str, dict[str, Any]]:
        return self.slurm.slurm_pools()

    def slurm_job(self, attempt_id: str) -> SlurmJobRow | None:
        return self.slurm.slurm_job(attempt_id)

    def record_slurm_job(
        self,
        attempt_id: str,
        pool: str,
        job_id: str,
        now: float,
        message: str,
        fence: FencingToken | None,
    ) -> None:
        self.slurm.record_slurm_job(attempt_id, pool, job_id, now, message, fence)

    def set_slurm_job_state(
        self, attempt_id: str, state: str, reason: str, fence: FencingToken
    ) -> None:
        self.slurm.set_slurm_job_state(attempt_id, state, reason, fence)

    # --- watches (watches.py) ----------------------------------------------------------------

    def insert_watch(self, row: WatchRow) -> None:
        self.watches.insert_watch(row)

    def get_watch(self, name: str) -> WatchRow | None:
        return self.watches.get_watch(name)

    def list_watches(self) -> list[WatchRow]:
        return self.watches.list_watches()

    def set_watch_state(self, name: str, state: str) -> WatchRow:
        return self.watches.set_watch_state(name, state)

    def remove_watch(self, name: str) -> None:
        self.watches.remove_watch(name)

    def watch_occurrences(
        self, name: str, after: int = 0, limit: int = PAGE_LIMIT
    ) -> list[OccurrenceRow]:
        return self.watches.watch_occurrences(name, after, limit)

    def occurrences_before(self, name: str, before: int, limit: int) -> list[OccurrenceRow]:
        return self.watches.occurrences_before(name, before, limit)

    def latest_occurrences(self, name: str, limit: int) -> list[OccurrenceRow]:
        return self.watches.latest_occurrences(name, limit)

    def unjudged_occurrences(self) -> list[OccurrenceRow]:
        return self.watches.unjudged_occurrences()

    def start_occurrence(
        self,
        occurrence: OccurrenceRow,
        experiments: Sequence[ExperimentRow],
        next_due: float,
        fence: FencingToken,
    ) -> None:
        self.watches.start_occurrence(occurrence, experiments, next_due, fence)

    def judge_occurrence(
        self, watch: str, number: int, verdict: dict[str, Any], now: float, fence: FencingToken
    ) -> None:
        self.watches.judge_occurrence(watch, number, verdict, now, fence)

    # --- step faults (faults.py) -------------------------------------------------------------

    def note_step_fault(self, kind: str, name: str, error: str, now: float) -> StepFault:
        return self.faults.note_step_fault(kind, name, error, now)

    def clear_step_fault(self, kind: str, name: str) -> None:
        self.faults.clear_step_fault(kind, name)

    def step_faults(self, kind: str) -> dict[str, StepFault]:
        return self.faults.step_faults(kind)

    # --- timelines (timelinebook.py) ---------------------------------------------------------

    def put_timeline(
        self, attempt_id: str, timeline: dict[str, Any], events: list[dict[str, Any]], now: float
    ) -> int:
        return self.timelines.put_timeline(attempt_id, timeline, events, now)

    def timeline(self, attempt_id: str) -> dict[str, Any] | None:
        return self.timelines.timeline(attempt_id)

    def timeline_events(self, attempt_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        return self.timelines.timeline_events(attempt_ids)

    # --- noise profiles (noisebook.py) -------------------------------------------------------

    def noise_profile(self, key: ProfileKey) -> NoiseProfile | None:
        return self.noise.noise_profile(key)

    def put_noise_profile(self, profile: NoiseProfile, now: float) -> None:
        self.noise.put_noise_profile(profile, now)
