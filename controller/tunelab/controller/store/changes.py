"""The typed change records of the store's writes: which fields a write may set, and of what
type. Each is a ``TypedDict`` that a write takes as ``**fields: Unpack[...]``, so a misspelt or
mistyped field fails type checking; :func:`checked` checks the same at run time, before any
statement is written (a misspelt field is a bug in the caller: ``TypeError``).

A host's state and its two flags change only with a move (``HostMove``, through
``transition_host``); ``HostFields`` are the observations any write may set. Searches and
trials are written as whole rows (``search_models.SearchRow``/``TrialRow``), whose states are
checked when the row is made.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypedDict, TypeVar, Union, get_args, get_origin, get_type_hints

from tunelab.controller.states import AttemptState


class HostFields(TypedDict, total=False):
    """A host's observations and settings (never its state, drain or quarantine)."""

    address: str
    labels: dict[str, str]
    token: str | None
    metrics_url: str
    state_reason: str
    gpu_count: int
    gpus: list[dict[str, Any]]
    last_seen: float | None
    agent_instance_id: str
    agent_version: str
    failures: int


class HostMove(HostFields, total=False):
    """What a host's move writes beside its state: the flags it follows from, too."""

    drain: bool
    quarantined: bool


class ExperimentFields(TypedDict, total=False):
    """What an experiment's move writes beside its state."""

    started_at: float | None
    finished_at: float | None
    message: str
    cancel_requested: bool
    avoid_hosts: list[str]


class AttemptFields(TypedDict, total=False):
    """What an attempt's update or move writes beside its state."""

    prev_state: AttemptState | None
    dispatched_at: float | None
    acked_at: float | None
    finished_at: float | None
    unknown_since: float | None
    message: str
    result: dict[str, Any] | None
    gpu_summary: dict[str, Any] | None
    progress: dict[str, Any] | None
    agent_instance_id: str
    provenance: dict[str, Any] | None
    failure_reason: str
    failure_line: str


_HINTS: dict[type, dict[str, Any]] = {}
F = TypeVar("F", bound=Mapping[str, object])


def _hints(record: type) -> dict[str, Any]:
    if record not in _HINTS:
        _HINTS[record] = get_type_hints(record)
    return _HINTS[record]


def _fits(value: object, hint: Any) -> bool:
    """Does ``value`` have the type ``hint`` (classes, ``X | None``, ``list[...]``, ``dict[...]``,
    ``Any``; a container's items are not looked into)?"""
    if hint is Any:
        return True
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in get_args(hint))
    if hint is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return isinstance(value, hint)
    return isinstance(value, hint) and (hint is bool or not isinstance(value, bool))


def checked(fields: F, record: type, what: str) -> F:
    """``fields`` when every one is a field of ``record`` with a value of its type; else
    TypeError naming the field (before the caller writes anything)."""
    hints = _hints(record)
    for name, value in fields.items():
        if name not in hints:
            known = ", ".join(sorted(hints))
            raise TypeError(f"{what}: no field {name!r} (fields: {known})")
        if not _fits(value, hints[name]):
            raise TypeError(
                f"{what}: field {name!r} is {type(value).__name__}, expected {hints[name]}"
            )
    return fields
