"""One thread per run that samples the engine, the GPUs and the host at the run's step, on the
agent's clock, from just before the benchmark starts to its end; then joins the load
generator's series (same grid: the agent gives the bench its origin) into one bounded document.

Tick ``k`` runs at ``start + k*step``; what it reads is put in window ``k-1`` (gauges as read at
the window's end, counters and CPU shares as the rise over it). A tick that comes late (a slow
engine) lands in the window its time says; the windows it skipped stay empty. The thread stops
itself after :data:`MAX_TICKS`, so a run that is never stopped still holds bounded memory.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from tunelab.agent.gpu import GpuBackend
from tunelab.agent.system import System
from tunelab.agent.timeline.engine import BATCH_FLAGS, COUNTERS, Fetch, fetch_capped, read_engine
from tunelab.agent.timeline.probes import HostProbe, gpu_facts, read_gpus
from tunelab.bench.timeline.document import VERSION, Value, bounded

log = structlog.get_logger(__name__)
MAX_TICKS = 86_400  # a day at 1 s, six hours at 250 ms
ENGINE_TIMEOUT = 2.0


class TimelineRecorder:
    def __init__(
        self,
        step: float,
        gpu: GpuBackend,
        host: HostProbe,
        engine_port: int | None,
        client_pid: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.time,
        fetch: Fetch = fetch_capped,
        max_ticks: int = MAX_TICKS,
        start_at: float | None = None,
    ) -> None:
        self.step = step
        self.start_at = start_at or clock()
        self._gpu = gpu
        self._host = host
        self._port = engine_port
        self._client_pid = client_pid
        self._clock = clock
        self._fetch = fetch
        self._max_ticks = max_ticks
        self._columns: dict[str, array[float]] = {}
        self._windows: array[int] = array("q")
        self._last_counters: dict[str, float] = {}
        self.engine = ""
        self.gpus = gpu_facts(gpu)
        self.ticks = 0
        self.truncated = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- sampling -----------------------------------------------------------------------------

    def tick(self) -> None:
        """Read everything once and file it under the window that just ended."""
        now = self._clock()
        if self._host.client_pid is None:
            self._host.client_pid = self._client_pid()
        values: dict[str, Value] = {}
        if self._port:
            profile, engine = read_engine(self._port, min(ENGINE_TIMEOUT, self.step), self._fetch)
            self.engine = self.engine or profile
            for name, value in engine.items():
                if name in COUNTERS:
                    before = self._last_counters.get(name)
                    self._last_counters[name] = value
                    # a counter that fell was reset (an engine restart): its new value is the rise
                    values[name] = (
                        None if before is None else value - before if value >= before else value
                    )
                else:
                    values[name] = value
        values.update(read_gpus(self._gpu))
        values.update(self._host.read(now))
        window = math.floor((now - self.start_at) / self.step + 1e-6) - 1
        with self._lock:
            self.ticks += 1
            if window < 0:
                return  # the first tick: counters' and CPU times' starting values only
            self._file(window, values)

    def _file(self, window: int, values: Mapping[str, Value]) -> None:
        rows = len(self._windows)
        self._windows.append(window)
        for name, value in values.items():
            column = self._columns.get(name)
            if column is None:
                column = self._columns[name] = array("d", [math.nan] * rows)
            column.append(math.nan if value is None else value)
        for column in self._columns.values():
            if len(column) < rows + 1:
                column.append(math.nan)

    # --- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="run-timeline", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        k = 0
        while not self._stop.is_set():
            if self.ticks >= self._max_ticks:
                self.truncated = True
                return
            try:
                self.tick()
            except Exception:  # a bug here must not end the run: log it, stop sampling
                log.exception("timeline_tick_failed")
                return
            k = max(k + 1, math.floor((self._clock() - self.start_at) / self.step) + 1)
            self._stop.wait(max(0.0, self.start_at + k * self.step - self._clock()))

    def stop(self, timeout: float = ENGINE_TIMEOUT + 1.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the document -------------------------------------------------------------------------

    def document(self, client: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The run's timeline: the recorded series on their windows, the client's beside them
        (the same grid), bounded by ``document.bounded``."""
        with self._lock:
            windows = (max(self._windows) + 1) if self._windows else 0
            client_series: Mapping[str, list[Value]] = {}
            if client and client.get("step_seconds") == self.step:
                client_series = client.get("series") or {}
                windows = max(windows, int(client.get("windows") or 0))
            series: dict[str, list[Value]] = {n: list(v) for n, v in client_series.items()}
            for name, column in self._columns.items():
                out: list[Value] = [None] * windows
                summed = name in COUNTERS  # two ticks in one window: a counter's rises add up
                for window, value in zip(self._windows, column, strict=True):
                    if not math.isnan(value):
                        seen = out[window]
                        out[window] = value + seen if summed and seen is not None else value
                series[name] = out
            for name, values in series.items():
                series[name] = (list(values) + [None] * windows)[:windows]
        return bounded(
            {
                "timeline": VERSION,
                "step_seconds": self.step,
                "start": self.start_at,
                "windows": windows,
                "series": series,
                "points": list((client or {}).get("points") or []),
                "gpus": self.gpus,
                "engine": self.engine,
                "batch_flag": BATCH_FLAGS.get(self.engine, ""),
                "truncated": self.truncated,
            }
        )


@dataclass(frozen=True)
class TimelineSources:
    """What a run's recorder reads: passed to the executor by the daemon (and by tests)."""

    gpu: GpuBackend
    system: System
    fetch: Fetch = fetch_capped
    clock: Callable[[], float] = time.time

    def recorder(
        self,
        step: float,
        engine_port: int | None,
        client_pid: Callable[[], int | None],
        start_at: float | None = None,
    ) -> TimelineRecorder:
        return TimelineRecorder(
            step,
            self.gpu,
            HostProbe(self.system),
            engine_port,
            client_pid,
            clock=self.clock,
            fetch=self.fetch,
            start_at=start_at,
        )
