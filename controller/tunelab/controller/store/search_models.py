"""The searches' rows and the store's part for them (migrations 0006 and 0009; statements in
searches.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tunelab.analysis.evidence import Phase
from tunelab.controller.states import SearchState, TrialState
from tunelab.controller.store.models import ExperimentRow, FencingToken


@dataclass
class SearchRow:
    group: str
    name: str
    state: SearchState
    spec: dict[str, Any]  # SearchSpec.to_dict()
    base: dict[str, Any]  # the raw experiment document without search:
    submitted_at: float
    message: str = ""
    cancel_requested: bool = False
    finished_at: float | None = None

    def __post_init__(self) -> None:
        self.state = SearchState(self.state)  # a misspelt state fails here, not in the store


@dataclass
class TrialRow:
    group: str
    number: int
    params: dict[str, Any]
    state: TrialState
    created_at: float
    rung: int = 0
    experiment_id: str | None = None
    objective: float | None = None
    samples: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # for display only
    failure_reason: str = ""
    finished_at: float | None = None
    # the launch as evidence (migration 0009): tunelab.analysis.evidence.Launch is read from
    # these, never from details
    phase: str = "strategy"  # evidence.Phase: strategy, race, effect, drift_start, drift_end
    race_round: int = 0  # a race or effect launch's round (race.py)
    load: tuple[str, float] | None = None  # the load it was measured at: ("concurrency", 8.0)
    slo_ratios: dict[str, float] = field(default_factory=dict)  # per SLO, value / limit
    host: str = ""
    gpu_seconds: float | None = None  # as the budget counts them; None: not recorded

    def __post_init__(self) -> None:
        self.state = TrialState(self.state)  # a misspelt state fails here, not in the store
        Phase(self.phase)  # likewise a misspelt phase


class SearchStore(Protocol):
    def insert_search(self, row: SearchRow, request_id: str = "") -> str: ...
    def get_search(self, group: str) -> SearchRow | None: ...
    def running_searches(self) -> list[SearchRow]: ...
    def search_trials(self, group: str) -> list[TrialRow]: ...
    def add_trials(
        self,
        trials: Sequence[TrialRow],
        experiments: Sequence[ExperimentRow],
        fence: FencingToken,
    ) -> None: ...
    def finish_trial(self, trial: TrialRow, fence: FencingToken) -> None: ...
    def finish_search(
        self, group: str, state: SearchState, message: str, now: float, fence: FencingToken
    ) -> SearchRow: ...
    def request_search_cancel(self, group: str) -> SearchRow | None: ...
