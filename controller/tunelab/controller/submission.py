"""One submission path for ``SubmitExperiments``: a spec text becomes a search (one row; the
search driver queues its trials) or a group of queued experiments, and either is stored once
per client request id: a submission re-sent after its answer was lost returns the group the
first one made (experiments or search alike) and stores nothing again."""

from __future__ import annotations

import importlib.util
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from tunelab.controller.search import hostclass
from tunelab.controller.search.submit import SearchSubmission, search_from_text
from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.spec.errors import SpecIssue
from tunelab.controller.spec.expand import ExpandedExperiment
from tunelab.controller.spec.limits import SpecLimits
from tunelab.controller.spec.schema import WATCH_ADD
from tunelab.controller.states import ExperimentState, SearchState
from tunelab.controller.store import AttemptRow, ExperimentRow, Store
from tunelab.controller.store.models import selector_key
from tunelab.controller.store.search_models import SearchRow
from tunelab.controller.watches.spec import watch_from_text

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Submitted:
    """What a submission made: a search's group, or its experiments (with their attempts when
    it was a retry of one already queued, which may have started since)."""

    group: str
    search: bool = False
    experiments: list[ExperimentRow] = field(default_factory=list)
    attempts: dict[str, list[AttemptRow]] = field(default_factory=dict)
    again: bool = False  # a retry: the first submission's group, nothing stored now


def unique_ids(prefix: str, count: int) -> list[str]:
    """``count`` distinct random 64-bit ids (an 18,000-variant matrix collided with 32 bits;
    at 64 bits a collision with the stored ones is ~1e-10 even at a million experiments)."""
    ids: dict[str, None] = {}
    while len(ids) < count:
        ids[f"{prefix}{secrets.token_hex(8)}"] = None
    return list(ids)


def new_group() -> str:
    return f"g-{secrets.token_hex(8)}"


class Submissions:
    """Validates a spec text once, then stores what it asks for (unless a dry run)."""

    def __init__(self, store: Store, clock: Callable[[], float], limits: SpecLimits) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits

    def submit(self, text: str, source: str, request_id: str, dry_run: bool) -> Submitted:
        if watch_from_text(text, source, self._limits) is not None:
            raise SpecError([SpecIssue("watch", WATCH_ADD)])
        search = search_from_text(text, source, self._limits)
        if search is not None:
            return self._search(search, request_id, dry_run)
        return self._experiments(text, source, request_id, dry_run)

    def _experiments(self, text: str, source: str, request_id: str, dry_run: bool) -> Submitted:
        expanded = expand_text(text, source, self._limits)
        group = new_group()
        now = self._clock()
        rows = experiment_rows(expanded, group, now)
        if dry_run:
            return Submitted(group, experiments=rows)
        stored = self._store.insert_experiments(rows, request_id)
        if stored != group:
            return self._again(stored, request_id)
        log.info("experiments_submitted", group=group, count=len(rows), source=source)
        return Submitted(group, experiments=rows)

    def _search(self, search: SearchSubmission, request_id: str, dry_run: bool) -> Submitted:
        if search.spec.strategy == "tpe" and importlib.util.find_spec("optuna") is None:
            raise SpecError(
                [SpecIssue("search.strategy", "tpe needs Optuna on the controller: "
                           "pip install 'tunelab[search]' there, or use another strategy")]
            )  # fmt: skip
        mixed = hostclass.mixed_pool(search.first.get("host") or {}, self._store.list_hosts())
        if mixed is not None:  # its ranking would rank hosts
            raise SpecError([mixed])
        row = SearchRow(
            group=new_group(),
            name=search.name,
            state=SearchState.RUNNING,
            spec=search.spec.to_dict(),
            base=search.base,
            submitted_at=self._clock(),
            message="searching",
        )
        if dry_run:
            return Submitted(row.group, search=True)
        stored = self._store.insert_search(row, request_id)
        if stored != row.group:
            return self._again(stored, request_id)
        log.info("search_submitted", group=row.group, strategy=search.spec.strategy)
        return Submitted(row.group, search=True)

    def _again(self, group: str, request_id: str) -> Submitted:
        """A retry of a submission already stored: what the first one made, as it is now."""
        if self._store.get_search(group) is not None:
            log.info("search_resubmitted", group=group, request_id=request_id)
            return Submitted(group, search=True, again=True)
        log.info("experiments_resubmitted", group=group, request_id=request_id)
        earlier = self._store.group_experiments(group)
        attempts = self._store.attempts_for_many([e.id for e in earlier])
        return Submitted(group, experiments=earlier, attempts=attempts, again=True)


def experiment_rows(
    expanded: Sequence[ExpandedExperiment], group: str, now: float
) -> list[ExperimentRow]:
    """One QUEUED row per expanded experiment, all of ``group``."""
    ids = unique_ids("x-", len(expanded))
    return [
        ExperimentRow(
            id=ids[i],
            group=group,
            name=e.name,
            state=ExperimentState.QUEUED,
            spec=e.spec,
            priority=e.priority,
            varied=e.varied,
            selector_key=selector_key(e.host),
            gpus_needed=int(e.host.get("gpus") or 0),
            repeat_index=e.repeat_index,
            max_attempts=e.max_attempts,
            submitted_at=now,
        )
        for i, e in enumerate(expanded)
    ]
