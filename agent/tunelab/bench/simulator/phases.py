"""Scripted phases: engine metrics that step at known times, so the timeline's events can be
tested against when they happened (``--phase``, repeatable).

``KIND@START[-END][xRATE]``, seconds from the first generation request the simulator receives
(the benchmark's warm-up starts it):

- ``queue@10-30``: ``vllm:num_requests_waiting`` grows by RATE per second (default 2) over the
  phase while running stays as it is (a batch limit that binds);
- ``cache-full@20-40``: ``vllm:kv_cache_usage_perc`` reads 1.0 and ``vllm:num_preemptions``
  rises by RATE per second (default 5);
- ``slow@30x2``: requests that arrive in the phase stream RATE times slower (a speed change
  within one launch: the client's throughput steps down).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

KINDS = {"queue": 2.0, "cache-full": 5.0, "slow": 2.0}
_SYNTAX = re.compile(
    r"^(?P<kind>[a-z-]+)@(?P<start>\d+(?:\.\d+)?)(?:-(?P<end>\d+(?:\.\d+)?))?"
    r"(?:x(?P<rate>\d+(?:\.\d+)?))?$"
)


@dataclass(frozen=True)
class Phase:
    kind: str
    start: float
    end: float = math.inf
    rate: float = 0.0

    def overlap(self, elapsed: float) -> float:
        """Seconds of the phase that have passed at ``elapsed``."""
        return max(0.0, min(elapsed, self.end) - self.start)

    def active(self, elapsed: float) -> bool:
        return self.start <= elapsed < self.end


def parse_phase(text: str) -> Phase:
    match = _SYNTAX.match(text.strip().lower())
    if not match or match["kind"] not in KINDS:
        raise argparse.ArgumentTypeError(
            f"expected KIND@START[-END][xRATE] with KIND one of {', '.join(KINDS)}: {text!r}"
        )
    start = float(match["start"])
    end = float(match["end"]) if match["end"] else math.inf
    if end <= start:
        raise argparse.ArgumentTypeError(f"phase END must be after START: {text!r}")
    rate = float(match["rate"]) if match["rate"] else KINDS[match["kind"]]
    if rate <= 0:
        raise argparse.ArgumentTypeError(f"phase RATE must be > 0: {text!r}")
    return Phase(match["kind"], start, end, rate)


class Script:
    """The phases, timed from the first request (event-loop clock)."""

    def __init__(self, phases: Iterable[Phase]) -> None:
        self.phases = tuple(phases)
        self.origin: float | None = None

    def arrived(self, now: float) -> None:
        if self.origin is None:
            self.origin = now

    def _elapsed(self, now: float) -> float | None:
        return None if self.origin is None else now - self.origin

    def slowdown(self, now: float) -> float:
        elapsed = self._elapsed(now)
        factor = 1.0
        for p in self.phases:
            if p.kind == "slow" and elapsed is not None and p.active(elapsed):
                factor *= p.rate
        return factor

    def extra_waiting(self, now: float) -> int:
        elapsed = self._elapsed(now)
        if elapsed is None:
            return 0
        return sum(
            math.ceil(p.rate * p.overlap(elapsed))
            for p in self.phases
            if p.kind == "queue" and p.active(elapsed)
        )

    def cache_full(self, now: float) -> bool:
        elapsed = self._elapsed(now)
        return elapsed is not None and any(
            p.kind == "cache-full" and p.active(elapsed) for p in self.phases
        )

    def preemptions(self, now: float) -> int:
        elapsed = self._elapsed(now)
        if elapsed is None:
            return 0
        return sum(
            math.floor(p.rate * p.overlap(elapsed)) for p in self.phases if p.kind == "cache-full"
        )
