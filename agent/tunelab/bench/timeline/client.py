"""The load generator's series, binned as requests finish: sent, in flight, completed, errors,
output tokens (at the chunk that carried them), and TTFT / ITL percentiles per window.

Requests are binned after they end, from the times the load generator keeps anyway, so the
measuring loop does no extra work per chunk. Percentiles come from a per-window log histogram
(5 % buckets): a window holds a few hundred integers however many requests it saw.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from typing import Any

from tunelab.bench.stream import RequestRecord
from tunelab.bench.timeline.document import VERSION, Value, window_of

MAX_WINDOWS = 200_000  # a week at 1 s: beyond it requests are not binned (the run is capped anyway)
_BASE = math.log(1.05)


def _bucket(ms: float) -> int:
    return round(math.log(max(ms, 1e-3)) / _BASE)


def percentile(hist: Counter[int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of a log histogram, at its bucket's value (within 2.5 %)."""
    total = sum(hist.values())
    if not total:
        return None
    rank = q * (total - 1)
    seen = 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen > rank:
            return math.exp(bucket * _BASE)
    return math.exp(max(hist) * _BASE)


class ClientWindows:
    """Per-window client counts on the grid ``start + i * step`` (epoch seconds)."""

    def __init__(self, step: float, start: float = 0.0, perf_to_epoch: float | None = None) -> None:
        self.step = step
        self.start = start or time.time()
        # perf_counter -> epoch, fixed once: the windows stay aligned as the run goes on
        self._offset = time.time() - time.perf_counter() if perf_to_epoch is None else perf_to_epoch
        self.counts: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.in_flight: dict[int, float] = defaultdict(float)
        self.ttft: dict[int, Counter[int]] = defaultdict(Counter)
        self.itl: dict[int, Counter[int]] = defaultdict(Counter)
        self.last = -1
        self.points: list[dict[str, Any]] = []

    def _w(self, perf: float) -> int | None:
        w = window_of(perf + self._offset, self.start, self.step)
        if not 0 <= w < MAX_WINDOWS:
            return None
        self.last = max(self.last, w)
        return w

    def add(self, rec: RequestRecord) -> None:
        """Bin one finished request (warm-up ones too: the timeline starts at the warm-up)."""
        if not rec.start:
            return
        sent = self._w(rec.start)
        if sent is not None:
            self.counts["client.sent"][sent] += 1
        end = self._w(rec.end or rec.start)
        if end is not None:
            self.counts["client.completed" if rec.ok else "client.errors"][end] += 1
        self._overlap(rec.start, rec.end or rec.start)
        if rec.ok and rec.chunk_times:
            first = self._w(rec.chunk_times[0])
            if first is not None:
                self.ttft[first][_bucket(rec.ttft * 1000.0)] += 1
        self._tokens(rec)

    def _overlap(self, begin: float, end: float) -> None:
        """Time-weighted requests in flight: each window gets the share of it the request
        spanned, so the series is the window's mean in-flight count."""
        t = begin
        while t < end:
            w = self._w(t)
            if w is None:
                return
            window_end = (w + 1) * self.step + self.start - self._offset
            upto = min(end, window_end)
            self.in_flight[w] += max(0.0, upto - t) / self.step
            t = window_end

    def _tokens(self, rec: RequestRecord) -> None:
        chunks = rec.chunk_times
        if not chunks:
            return
        known = rec.chunk_tokens if all(t is not None for t in rec.chunk_tokens) else None
        each = rec.output_tokens / len(chunks)
        previous = rec.dispatched
        for i, at in enumerate(chunks):
            tokens = float(known[i] or 0) if known and i < len(known) else each
            w = self._w(at)
            if w is None:
                continue
            self.counts["client.output_tokens"][w] += tokens
            if i and tokens > 0:
                self.itl[w][_bucket((at - previous) * 1000.0 / tokens)] += round(tokens)
            previous = at

    def mark_point(
        self, index: int, began: float, measured: float, ended: float, **load: Any
    ) -> None:
        """One load point's span (perf_counter times): its warm-up, measured part and end, and
        its load (``concurrency``, ``request_rate``, ``ramp``: a rate that rises on purpose)."""
        origin = self.start - self._offset
        self.points.append(
            {
                "index": index,
                "start_s": round(began - origin, 3),
                "measure_s": round(measured - origin, 3),
                "end_s": round(ended - origin, 3),
                **load,
            }
        )
        self._w(ended)

    def to_dict(self) -> dict[str, Any]:
        windows = self.last + 1
        series: dict[str, list[Value]] = {}
        for name in ("client.sent", "client.completed", "client.errors", "client.output_tokens"):
            counts = self.counts.get(name, {})
            series[name] = [float(counts.get(w, 0)) for w in range(windows)]
        series["client.in_flight"] = [float(self.in_flight.get(w, 0.0)) for w in range(windows)]
        for name, hists in (("ttft", self.ttft), ("itl", self.itl)):
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                series[f"client.{name}_{label}_ms"] = [
                    percentile(hists[w], q) if w in hists else None for w in range(windows)
                ]
        return {
            "timeline": VERSION,
            "step_seconds": self.step,
            "start": self.start,
            "windows": windows,
            "series": series,
            "points": self.points,
        }
