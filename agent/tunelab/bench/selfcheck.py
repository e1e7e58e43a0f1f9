"""The client watching itself: event-loop lag and CPU while a point is measured.

A chunk's arrival time is taken when the event loop gets round to reading it; if the loop is
busy (or the process is short of CPU), every timestamp is late by that much and a slow client
looks like a slow server. A timer every 20 ms measures how late the loop runs it (this includes up
to 1 ms of epoll's millisecond rounding even when idle); CPU time over wall time says how close
the single-threaded client is to a full core.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tunelab.bench.stats import percentile

SAMPLE_INTERVAL = 0.02  # each wake-up costs ~0.2 ms of CPU on a small VM: 1 % of a core


@dataclass(frozen=True)
class SelfCheck:
    lag_mean_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    cpu_seconds: float
    wall_seconds: float
    max_mean_lag_ms: float  # thresholds in force
    max_lag_ms: float
    max_cpu: float

    @property
    def cpu_utilization(self) -> float:
        """CPU seconds per wall second (1.0 = one core busy)."""
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def reasons(self) -> list[str]:
        out = []
        if self.lag_mean_ms > self.max_mean_lag_ms:
            out.append(
                f"event-loop lag mean {self.lag_mean_ms:.1f} ms > {self.max_mean_lag_ms:g} ms: "
                "chunk timestamps are late"
            )
        if self.lag_p99_ms > self.max_lag_ms:
            out.append(
                f"event-loop lag p99 {self.lag_p99_ms:.1f} ms > {self.max_lag_ms:g} ms: "
                "chunk timestamps are late"
            )
        if self.cpu_utilization > self.max_cpu:
            out.append(
                f"client CPU {self.cpu_utilization:.0%} of a core > {self.max_cpu:.0%}: "
                "the client is near saturation"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "client_saturated": bool(self.reasons()),
            "reasons": self.reasons(),
            "loop_lag_mean_ms": self.lag_mean_ms,
            "loop_lag_p99_ms": self.lag_p99_ms,
            "loop_lag_max_ms": self.lag_max_ms,
            "cpu_seconds": self.cpu_seconds,
            "cpu_utilization": self.cpu_utilization,
            "max_mean_loop_lag_ms": self.max_mean_lag_ms,
            "max_loop_lag_ms": self.max_lag_ms,
            "max_cpu_utilization": self.max_cpu,
        }


class Monitor:
    """Start before the measured phase, :meth:`stop` after it."""

    def __init__(self, max_mean_lag_ms: float, max_lag_ms: float, max_cpu: float) -> None:
        self.max_mean_lag_ms = max_mean_lag_ms
        self.max_lag_ms = max_lag_ms
        self.max_cpu = max_cpu
        self.lags: list[float] = []
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        self._tick()

    def _tick(self) -> None:
        """A plain timer callback (no task, no future): cheap enough to run 100 times a second."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._due:
            self.lags.append(now - self._due)
        self._due = now + SAMPLE_INTERVAL
        self._handle = loop.call_at(self._due, self._tick)

    def stop(self) -> SelfCheck:
        cpu = time.process_time() - self._cpu0
        wall = time.perf_counter() - self._wall0
        if self._handle is not None:
            self._handle.cancel()
        lags = sorted(lag * 1000.0 for lag in self.lags)
        return SelfCheck(
            lag_mean_ms=sum(lags) / len(lags) if lags else 0.0,
            lag_p99_ms=percentile(lags, 99),
            lag_max_ms=lags[-1] if lags else 0.0,
            cpu_seconds=cpu,
            wall_seconds=wall,
            max_mean_lag_ms=self.max_mean_lag_ms,
            max_lag_ms=self.max_lag_ms,
            max_cpu=self.max_cpu,
        )
