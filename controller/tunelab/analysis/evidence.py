"""The launch record: one launch of a search as evidence, typed (issue 43.2).

A search's trials are stored with these fields as columns (migration 0009_launch_evidence.sql);
the race (analysis/race.py), drift (analysis/drift.py) and the answer read :class:`Launch`,
never a trial's ``details`` (kept for display only). The record is meant to grow: a later
cost model may add ``blocks`` (values of blocks within the launch), ``load_seconds`` and
``measure_seconds`` without touching the judge or the race's rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    """Why a launch was made."""

    STRATEGY = "strategy"  # the strategy's trial: ranked, found its own load
    RACE = "race"  # a race round at the incumbent's load (``round`` >= 1)
    EFFECT = "effect"  # a fresh launch of the winner or the default, for the effect
    DRIFT_START = "drift_start"  # the default at the search's start, at a fixed load
    DRIFT_END = "drift_end"  # ... and at its end

    @property
    def fixed_load(self) -> bool:
        """Launched at a load it was given: no ranking, trial budget or strategy sees it."""
        return self is not Phase.STRATEGY


Load = tuple[str, float]  # ("concurrency", 14.0), ("rate", 4.0)


@dataclass(frozen=True)
class Launch:
    """One launch: which configuration, why, at what load, and what it measured.

    ``value`` is the objective over this launch (the mean of its answer points), None when it
    failed or met no load; ``slo_ratios`` per SLO the value over its limit (above 1 missed it).
    ``client_limited``: the load generator was saturated, so the launch is no evidence about the
    server (neither a value nor a failure of the configuration)."""

    number: int
    config: str
    phase: Phase = Phase.STRATEGY
    round: int = 0
    rung: int = 0
    load: Load | None = None
    value: float | None = None
    slo_ratios: Mapping[str, float] = field(default_factory=dict)
    host: str = ""
    failed: bool = False
    client_limited: bool = False
    running: bool = False
    gpu_seconds: float = 0.0
    blocks: tuple[float, ...] = ()  # the value of each block of its answer point (issue 44)

    @property
    def missed(self) -> bool:
        """Missed an SLO at its load."""
        return any(r > 1.0 for r in self.slo_ratios.values())

    @property
    def counts_as_failure(self) -> bool:
        """A failure of the configuration (a client-limited launch is not one)."""
        return self.failed and not self.client_limited
