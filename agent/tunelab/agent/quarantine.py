"""State files the agent could not read: kept (renamed), listed in GetInfo, counted on /metrics.

An unreadable record is never skipped silently: its server may still run, and an operator must
see that something on disk was wrong. Shared by servers and runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

MAX_LISTED = 1000  # a state dir full of junk must not grow the agent without bound


@dataclass(frozen=True)
class QuarantinedFile:
    path: Path  # where it was
    reason: str
    kept_as: Path | None  # where it is now (None when even the rename failed)
    at: float


class QuarantineList:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[QuarantinedFile] = []
        self._count = 0

    def add(self, path: Path, reason: str, kept_as: Path | None) -> None:
        with self._lock:
            self._count += 1
            if len(self._items) < MAX_LISTED:
                self._items.append(QuarantinedFile(path, reason, kept_as, time.time()))

    def items(self) -> list[QuarantinedFile]:
        with self._lock:
            return list(self._items)

    def count(self) -> int:
        with self._lock:
            return self._count


class StateHealthCollector(Collector):
    """``tunelab_agent_state_files_quarantined`` and ``tunelab_agent_state_writes_pending``,
    read at scrape time."""

    def __init__(self, quarantined: Callable[[], int], pending: Callable[[], int]) -> None:
        self._quarantined = quarantined
        self._pending = pending

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "tunelab_agent_state_files_quarantined",
            "State files found unreadable at start-up and kept under a quarantined name.",
            value=self._quarantined(),
        )
        yield GaugeMetricFamily(
            "tunelab_agent_state_writes_pending",
            "State documents not on disk yet (write failed: disk full or I/O error; retrying).",
            value=self._pending(),
        )
