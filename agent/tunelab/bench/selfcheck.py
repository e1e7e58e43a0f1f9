"""The client watching itself: event-loop lag, CPU and run-queue wait while a point is measured.

A chunk's arrival time is taken when the event loop gets round to reading it; if the loop runs
late, every timestamp is late by that much and a slow client looks like a slow server. A timer
every 20 ms measures how late the loop runs it (this includes up to 1 ms of epoll's millisecond
rounding even when idle). Late has two causes, told apart by their evidence:
- ``client_saturated``: the client ran out of CPU: its CPU time over wall time is near a full
  core (it is single-threaded), so it cannot keep up with what it receives.
- ``client_starved``: late without being saturated; ``client_cause`` names what the evidence
  shows: ``cpu_wait`` (the kernel kept it in the run queue, ``/proc/thread-self/schedstat``,
  more than ``max_runqueue`` of the time, e.g. a server busy-polling on the same cores: pin
  them apart with ``taskset``), ``connection_setup`` (it was opening connections while it was
  late) or ``event_loop_lag`` (neither: the loop itself was blocked, e.g. by a GC pause).
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunelab.bench.stats import percentile

SAMPLE_INTERVAL = 0.02  # each wake-up costs ~0.2 ms of CPU on a small VM: 1 % of a core
SCHEDSTAT = Path("/proc/thread-self/schedstat")  # on-CPU ns, run-queue wait ns, timeslices


def runqueue_wait_seconds(path: Path = SCHEDSTAT) -> float | None:
    """Seconds this thread has waited for a CPU since it started; None where not available."""
    try:
        return int(path.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


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
    runqueue_wait_seconds: float | None = None  # None: the kernel does not say
    involuntary_switches: int = 0
    max_runqueue: float = 0.05
    connections_opened: int = 0  # by the pool while the point was measured

    @property
    def cause(self) -> str:
        """What the evidence shows: "" (fine), ``cpu_saturated``, ``cpu_wait`` (run queue),
        ``connection_setup`` (late while connecting) or ``event_loop_lag`` (late, neither)."""
        if self.saturated_reasons():
            return "cpu_saturated"
        ratio = self.runqueue_ratio
        if ratio is not None and ratio > self.max_runqueue:
            return "cpu_wait"
        if not self._late():
            return ""
        return "connection_setup" if self.connections_opened else "event_loop_lag"

    @property
    def runqueue_ratio(self) -> float | None:
        """Share of the wall time the client waited for a CPU."""
        if self.runqueue_wait_seconds is None or self.wall_seconds <= 0:
            return None
        return self.runqueue_wait_seconds / self.wall_seconds

    @property
    def cpu_utilization(self) -> float:
        """CPU seconds per wall second (1.0 = one core busy)."""
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def _late(self) -> list[str]:
        out = []
        if self.lag_mean_ms > self.max_mean_lag_ms:
            out.append(
                f"event-loop lag mean {self.lag_mean_ms:.1f} ms > {self.max_mean_lag_ms:g} ms"
            )
        if self.lag_p99_ms > self.max_lag_ms:
            out.append(f"event-loop lag p99 {self.lag_p99_ms:.1f} ms > {self.max_lag_ms:g} ms")
        return out

    def saturated_reasons(self) -> list[str]:
        """The client used (nearly) all of a core: it is the bottleneck."""
        if self.cpu_utilization <= self.max_cpu:
            return []
        late = "; ".join(self._late())
        return [
            f"client CPU {self.cpu_utilization:.0%} of a core > {self.max_cpu:.0%}: the client "
            "is near saturation" + (f" ({late}: chunk timestamps are late)" if late else "")
        ]

    def starved_reasons(self) -> list[str]:
        """The client wanted a CPU and waited for it: something else ran on its cores."""
        out = []
        ratio = self.runqueue_ratio
        if ratio is not None and ratio > self.max_runqueue:
            out.append(
                f"client waited for a CPU {ratio:.0%} of the time > {self.max_runqueue:.0%} "
                f"({self.involuntary_switches} involuntary switches): it was starved, not busy; "
                "pin it to a core of its own"
            )
        late = self._late()
        if late and self.cpu_utilization <= self.max_cpu and (ratio is None or not out):
            waited = f"{ratio:.1%}" if ratio is not None else "unknown"
            if self.connections_opened:
                out.append(
                    f"{'; '.join(late)} while the client opened {self.connections_opened} "
                    f"connections during the measurement (CPU {self.cpu_utilization:.0%} of a "
                    f"core, run-queue wait {waited}): connection set-up held the event loop"
                )
            else:
                out.append(
                    f"{'; '.join(late)} with the client at {self.cpu_utilization:.0%} of a "
                    f"core and a run-queue wait of {waited}: the event loop was blocked (a "
                    "pause such as garbage collection or a synchronous step), not kept from "
                    "the CPU"
                )
        return out

    def reasons(self) -> list[str]:
        return self.saturated_reasons() + self.starved_reasons()

    def to_dict(self) -> dict[str, Any]:
        ratio = self.runqueue_ratio
        return {
            "client_saturated": bool(self.saturated_reasons()),
            "client_starved": bool(self.starved_reasons()),
            "client_cause": self.cause,
            "connections_opened": self.connections_opened,
            "saturated_reasons": self.saturated_reasons(),
            "starved_reasons": self.starved_reasons(),
            "reasons": self.reasons(),
            "runqueue_wait_seconds": self.runqueue_wait_seconds,
            "runqueue_wait_ratio": ratio,
            "involuntary_switches": self.involuntary_switches,
            "max_runqueue_wait_ratio": self.max_runqueue,
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

    def __init__(
        self,
        max_mean_lag_ms: float,
        max_lag_ms: float,
        max_cpu: float,
        max_runqueue: float = 0.05,
    ) -> None:
        self.max_mean_lag_ms = max_mean_lag_ms
        self.max_lag_ms = max_lag_ms
        self.max_cpu = max_cpu
        self.max_runqueue = max_runqueue
        self._rq0: float | None = None
        self._nivcsw0 = 0
        self.lags: list[float] = []
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        self._rq0 = runqueue_wait_seconds()
        self._nivcsw0 = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        self._tick()

    def _tick(self) -> None:
        """A plain timer callback (no task, no future): cheap enough to run 100 times a second."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._due:
            self.lags.append(now - self._due)
        self._due = now + SAMPLE_INTERVAL
        self._handle = loop.call_at(self._due, self._tick)

    def stop(self, connections_opened: int = 0) -> SelfCheck:
        cpu = time.process_time() - self._cpu0
        wall = time.perf_counter() - self._wall0
        rq = runqueue_wait_seconds()
        waited = rq - self._rq0 if rq is not None and self._rq0 is not None else None
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - self._nivcsw0
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
            runqueue_wait_seconds=waited,
            involuntary_switches=switches,
            max_runqueue=self.max_runqueue,
            connections_opened=connections_opened,
        )
