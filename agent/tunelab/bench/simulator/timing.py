"""Sub-millisecond timer accuracy for the simulator's event loop, and a record of how late it was.

asyncio waits for its next timer in ``epoll_wait``, whose timeout is whole milliseconds rounded
up: every chunk would leave 0-1 ms late, uniformly, which is as large as the errors we want to
see in the clients. :class:`PreciseSelector` waits the whole milliseconds in epoll and the
remainder in ``nanosleep`` (no busy spin, so an idle simulator costs nothing), and
:class:`LatenessStats` records, for every write, how far after its deadline it went out.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import math
import selectors
import sys
import time
from collections.abc import Callable
from typing import Any

_Ready = list[tuple[selectors.SelectorKey, int]]

if hasattr(selectors, "EpollSelector"):
    _Base: type[selectors.BaseSelector] = selectors.EpollSelector
else:  # pragma: no cover - macOS and the like: millisecond rounding stays
    _Base = selectors.DefaultSelector


class PreciseSelector(_Base):  # type: ignore[valid-type,misc]
    """A selector whose timeouts are honoured to tens of microseconds instead of 1 ms."""

    def select(self, timeout: float | None = None) -> _Ready:
        if timeout is None or timeout <= 0:
            ready: _Ready = super().select(timeout)
            return ready
        whole_ms = math.floor(timeout * 1000.0)
        if whole_ms >= 1:
            # EpollSelector rounds up to whole ms; ask for just under ``whole_ms`` so it waits
            # exactly that, returning early when a socket is ready. The loop then asks again
            # for the sub-millisecond rest.
            ready = super().select((whole_ms - 0.5) / 1000.0)
            return ready
        # Less than 1 ms to the next timer: sleep it off, then collect whatever became ready.
        time.sleep(timeout)
        ready = super().select(0)
        return ready


PR_SET_TIMERSLACK = 29


def _tighten_timer_slack() -> None:
    """Ask Linux for 1 µs timer slack (default 50 µs) so short sleeps end when asked."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)


def new_event_loop() -> asyncio.AbstractEventLoop:
    _tighten_timer_slack()
    return asyncio.SelectorEventLoop(PreciseSelector())


class DeadlineScheduler:
    """Runs callbacks at absolute loop times from one heap of plain tuples and one loop timer.

    With 1024 streams, a loop timer per chunk makes asyncio's heap compare ``TimerHandle``
    objects in Python; tuples compare in C, and all callbacks that are due run in one batch.
    A batch yields to I/O after ``BATCH`` callbacks, so arriving requests are read promptly, and
    takes along what is due within ``WINDOW`` (so up to 0.1 ms early): with deadlines spread
    over time, waking once per deadline would cost a loop iteration per chunk.
    """

    BATCH = 128
    WINDOW = 0.0001

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.timer: asyncio.Handle | None = None
        self.armed_at = math.inf
        self.firing = False

    def at(self, when: float, callback: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, callback))
        if not self.firing and when < self.armed_at:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.armed_at = when
        self.timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.timer = None
        self.armed_at = math.inf
        self.firing = True
        heap, clock, window = self.heap, self.loop.time, self.WINDOW
        ran = 0
        try:
            while heap and heap[0][0] <= clock() + window:
                heapq.heappop(heap)[2]()
                ran += 1
                if ran >= self.BATCH:
                    self.armed_at = -math.inf
                    self.timer = self.loop.call_soon(self._fire)
                    return
        finally:  # re-armed even when a callback raised, so one bug cannot stall every stream
            self.firing = False
            if self.timer is None and heap:
                self._arm(heap[0][0])


class LatenessStats:
    """Counts of write lateness (actual - deadline) in 10 µs bins up to 100 ms, plus the max."""

    BIN_SECONDS = 10e-6
    BINS = 10_000

    def __init__(self) -> None:
        self.counts = [0] * (self.BINS + 1)
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, lateness: float) -> None:
        """``lateness`` may be slightly negative (a batch takes along what is due within 0.1 ms):
        it counts in the first bin and, signed, in the mean."""
        late = lateness if lateness > 0.0 else 0.0
        index = int(late / self.BIN_SECONDS)
        self.counts[index if index < self.BINS else self.BINS] += 1
        self.count += 1
        self.total += lateness
        if late > self.max:
            self.max = late

    def quantile(self, q: float) -> float:
        """Upper edge of the bin holding quantile ``q`` (seconds); 0 with no data; 100 ms when it
        falls in the overflow bin (read: at least 100 ms)."""
        if self.count == 0:
            return 0.0
        target = q * self.count
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= target and n:
                return min(min(index + 1, self.BINS) * self.BIN_SECONDS, self.max)
        return self.max

    def summary(self) -> dict[str, Any]:
        return {
            "writes": self.count,
            "mean_ms": (self.total / self.count * 1000.0) if self.count else 0.0,
            "p50_ms": self.quantile(0.5) * 1000.0,
            "p99_ms": self.quantile(0.99) * 1000.0,
            "max_ms": self.max * 1000.0,
        }
