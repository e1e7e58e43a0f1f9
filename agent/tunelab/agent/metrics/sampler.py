"""The one background thread that reads slow sources, so that a scrape only renders samples.

Each :class:`Source` says at which cadences it has work: STATIC once at start (retried on the
slow tick until it succeeds), FAST every ``interval`` (1 s by default), SLOW every
``slow_interval`` (15 s). A source keeps its own latest sample, replaced whole (one reference
swap), so collectors on scrape threads read it without locks. The sampler keeps, per source and
cadence, the last cycle's duration, the time of the last complete success (freshness) and an
error count, and the thread's own CPU time, which is what its overhead claim is checked against.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from tunelab.agent.gpu import Cadence, GpuError

log = structlog.get_logger(__name__)

# What a source may raise for one failed cycle: NVML trouble, a vanished file, a garbled line.
# Anything else is a bug: it is logged with its traceback and ends the thread, and the sample
# age then grows so the staleness is visible on /metrics.
SAMPLE_ERRORS: tuple[type[Exception], ...] = (GpuError, OSError, ValueError)


class Source(Protocol):
    """Something the sampler reads; it keeps its own latest sample."""

    name: str
    cadences: frozenset[Cadence]

    def sample(self, cadence: Cadence) -> None:
        """Read what belongs to ``cadence`` and publish it; raise a SAMPLE_ERRORS on failure."""
        ...


@dataclass(frozen=True)
class CycleStats:
    """One source at one cadence: how long the last cycle took and when it last fully worked."""

    duration_seconds: float = 0.0
    last_success: float | None = None  # sampler clock (monotonic) of the last error-free cycle
    errors: int = 0
    failing: bool = False  # the last cycle failed


class Sampler:
    """Runs the sources' cycles on one thread with an interruptible wait between them."""

    def __init__(
        self,
        sources: Iterable[Source],
        interval: float = 1.0,
        slow_interval: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0 or slow_interval <= 0:
            raise ValueError("sampler intervals must be > 0")
        self.sources = list(sources)
        self.interval = interval
        self.slow_interval = slow_interval
        self.clock = clock
        self._stats: dict[tuple[str, Cadence], CycleStats] = {}
        self._static_done: set[str] = set()
        self._ticked = False
        self._next_fast = 0.0
        self._next_slow = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_seconds = 0.0  # CPU time of the sampler thread so far
        self.generation = 0  # ticks run so far: a cached exposition is stale once this moves

    # --- reading the stats (any thread) ---------------------------------------------------------

    def stats(self) -> Mapping[tuple[str, Cadence], CycleStats]:
        return dict(self._stats)

    def age(self, source: str, cadence: Cadence) -> float | None:
        """Seconds since ``source`` last completed a ``cadence`` cycle without error."""
        stats = self._stats.get((source, cadence))
        if stats is None or stats.last_success is None:
            return None
        return max(0.0, self.clock() - stats.last_success)

    # --- the cycles ---------------------------------------------------------------------------

    def tick(self) -> float:
        """Run every cycle that is due now; return the clock time at which the next one is."""
        now = self.clock()
        first, self._ticked = not self._ticked, True
        slow_due = first or now >= self._next_slow
        if slow_due:
            self._run(Cadence.STATIC, [s for s in self.sources if s.name not in self._static_done])
        if first or now >= self._next_fast:  # before the slow fields, so cheap data comes first
            self._run(Cadence.FAST, self.sources)
            self._next_fast = _advance(self._next_fast, self.interval, now)
        if slow_due:
            self._run(Cadence.SLOW, self.sources)
            self._next_slow = _advance(self._next_slow, self.slow_interval, now)
        self.cpu_seconds = time.thread_time()
        self.generation += 1
        return min(self._next_fast, self._next_slow)

    def _run(self, cadence: Cadence, sources: Iterable[Source]) -> None:
        for source in sources:
            if cadence not in source.cadences:
                continue
            key = (source.name, cadence)
            before = self._stats.get(key, CycleStats())
            start = self.clock()
            try:
                source.sample(cadence)
            except SAMPLE_ERRORS as exc:
                errors = before.errors + 1
                self._stats[key] = replace(
                    before, duration_seconds=self.clock() - start, errors=errors, failing=True
                )
                if _worth_logging(errors):
                    log.warning(
                        "metrics_sample_failed",
                        source=source.name,
                        cadence=cadence.value,
                        errors=errors,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                continue
            end = self.clock()
            if before.failing:
                log.info("metrics_sample_recovered", source=source.name, cadence=cadence.value)
            self._stats[key] = replace(
                before, duration_seconds=end - start, last_success=end, failing=False
            )
            if cadence is Cadence.STATIC:
                self._static_done.add(source.name)

    # --- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="metrics-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                due = self.tick()
                self._stop.wait(max(0.0, due - self.clock()))
        except Exception:  # a bug: say so loudly; the growing sample age shows it on /metrics
            log.exception("metrics_sampler_crashed")
            raise

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def _advance(due: float, interval: float, now: float) -> float:
    """The next due time on the original grid; skip missed ticks rather than bursting."""
    due += interval
    if due <= now:
        due = now + interval
    return due


def _worth_logging(errors: int) -> bool:
    """Log the 1st, 10th, 100th, ... failure: a broken source must not flood the log at 1 Hz."""
    while errors % 10 == 0:
        errors //= 10
    return errors == 1
