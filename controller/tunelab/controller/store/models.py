"""Plain rows the store reads and writes; the rest of the controller works with these."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store.changes import AttemptFields


@dataclass(frozen=True)
class FencingToken:
    """Proof of one scheduling turn, handed to the writes of the pass it guards and checked in
    their transaction. ``epoch`` rises each time a controller takes the turn; ``holder`` is
    the database session holding it (PostgreSQL's backend pid; 0 for SQLite, whose one
    controller always holds the turn)."""

    epoch: int
    holder: int = 0


@dataclass
class HostRow:
    name: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)
    token: str | None = None
    metrics_url: str = ""
    state: HostState = HostState.UNREACHABLE
    state_reason: str = "not polled yet"
    drain: bool = False
    quarantined: bool = False
    gpu_count: int = 0
    gpus: list[dict[str, Any]] = field(default_factory=list)
    last_seen: float | None = None
    agent_instance_id: str = ""
    agent_version: str = ""
    failures: int = 0
    added_at: float = 0.0


@dataclass
class ExperimentRow:
    id: str
    group: str
    name: str
    state: ExperimentState
    spec: dict[str, Any]
    priority: int = 0
    varied: dict[str, str] = field(default_factory=dict)
    selector_key: str = ""
    gpus_needed: int = 0
    repeat_index: int = 1
    max_attempts: int = 3
    avoid_hosts: list[str] = field(default_factory=list)
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""
    cancel_requested: bool = False
    seq: int = 0

    @property
    def selector(self) -> dict[str, Any]:
        return dict(self.spec.get("host", {}))


@dataclass
class AttemptRow:
    id: str
    experiment_id: str
    number: int
    host: str
    state: AttemptState
    gpus: list[int] = field(default_factory=list)
    prev_state: AttemptState | None = None
    created_at: float = 0.0
    dispatched_at: float | None = None
    acked_at: float | None = None
    finished_at: float | None = None
    unknown_since: float | None = None
    message: str = ""
    result: dict[str, Any] | None = None
    gpu_summary: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    agent_instance_id: str = ""
    provenance: dict[str, Any] | None = None  # recorded by the agent before the server started
    failure_reason: str = ""  # the agent's reason name without its prefix ("CUDA_OOM"), or ""
    failure_line: str = ""  # the log line it was read from


def selector_key(host: dict[str, Any]) -> str:
    """Canonical text of a host selector: experiments with equal keys compete for the same hosts."""
    return json.dumps(
        {
            "name": host.get("name", ""),
            "labels": host.get("labels", {}),
            "gpus": host.get("gpus", 0),
        },
        sort_keys=True,
    )


@dataclass(frozen=True)
class AttemptChange:
    """One attempt's part of a batched write (``Store.change_attempts``): columns to set and,
    optionally, a move to ``target`` if the attempt is still in one of ``expect``."""

    attempt_id: str
    fields: AttemptFields = field(default_factory=lambda: AttemptFields())
    target: AttemptState | None = None
    expect: tuple[AttemptState, ...] = ()
    message: str = ""
