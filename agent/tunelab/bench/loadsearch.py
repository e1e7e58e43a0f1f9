"""Finding the largest load that meets every SLO, on one running server: a pure planner the
sweep asks for the next load and tells each point's figures.

Ladder: 1, 2, 4, ... (a rate starts at max/64) until a point breaks an SLO or the maximum is
reached; then bisection between the last load that met them and the first that did not, until
the two are within 1/8 of each other (or 1 apart for a concurrency); then a confirming repeat at
the answer. If the repeat breaks an SLO, the answer steps down to the largest other load that met
them. A point whose requests failed never meets the SLOs.

With a ``plateau`` fraction the ladder also stops where two doublings in a row each raised the
output throughput by less than that fraction: past the knee a larger load only queues (a server
with 8 batch slots meets a TPOT SLO at any concurrency, its TTFT paying for it), so the answer is
the load before them, which serves as much at lower latency, and the search spends no time on
points that measure queueing. Two, because one short point at a small load can come out flat by
chance (connection set-up, a first request's warm-up) where the next doubling gains again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TOLERANCE = 1 / 8  # bisection stops when hi - lo <= lo * TOLERANCE
RATE_START = 64  # a rate ladder starts at max / 64


def meets(slo: Mapping[str, float], summary: Mapping[str, Any]) -> bool:
    if not summary.get("completed") or summary.get("failed"):
        return False
    for name, limit in slo.items():
        value = summary.get(name)
        if not isinstance(value, int | float) or value > limit:
            return False
    return True


@dataclass
class LoadSearch:
    axis: str  # "concurrency" or "rate"
    maximum: float
    slo: dict[str, float]
    passed: list[float] = field(default_factory=list)
    failed: list[float] = field(default_factory=list)
    confirmed: bool | None = None  # None: the confirming repeat has not run
    phase: str = "ladder"
    probes: list[dict[str, Any]] = field(default_factory=list)
    plateau: float = 0.0  # 0: off; else the least relative throughput gain a doubling must give
    flat: list[float] = field(default_factory=list)  # the ladder's last loads reached without gain
    throughput: dict[float, float] = field(default_factory=dict)  # passed load -> tok/s

    def _round(self, value: float) -> float:
        return float(max(1, round(value))) if self.axis == "concurrency" else round(value, 4)

    def _start(self) -> float:
        return 1.0 if self.axis == "concurrency" else self._round(self.maximum / RATE_START)

    @property
    def plateau_at(self) -> float | None:
        """The first of two doublings in a row that gained too little: the ladder stopped."""
        return self.flat[0] if len(self.flat) >= 2 else None

    def best_passed(self) -> float | None:
        ceiling = min([*self.failed, *([self.plateau_at] if self.plateau_at else [])], default=None)
        below = [p for p in self.passed if ceiling is None or p < ceiling]
        return max(below) if below else None

    def _plateaued(self, load: float) -> bool:
        """Did the doubling that reached ``load`` (a passed ladder point) gain too little?"""
        lower = [p for p in self.passed if p < load and p in self.throughput]
        if not self.plateau or not lower or load not in self.throughput:
            return False
        before = self.throughput[max(lower)]
        return before > 0 and self.throughput[load] < before * (1 + self.plateau)

    def next_load(self) -> float | None:
        """The next load to measure, or None when the answer is known."""
        if self.phase == "ladder":
            if not self.passed and not self.failed:
                return self._start()
            if self.failed:
                self.phase = "bisect"
            elif self.plateau_at is not None:
                self.phase = "confirm"
            else:
                top = max(self.passed)
                if top >= self.maximum:
                    self.phase = "confirm"
                else:
                    return min(self.maximum, self._round(top * 2))
        if self.phase == "bisect":
            lo, hi = self.best_passed(), min(self.failed)
            if lo is None:
                self.phase = "done"  # even the smallest load broke an SLO
                return None
            step_done = hi - lo <= 1 if self.axis == "concurrency" else hi - lo <= lo * TOLERANCE
            if not step_done and self.axis == "concurrency" and hi - lo <= lo * TOLERANCE:
                step_done = True
            if not step_done:
                mid = self._round((lo + hi) / 2) if self.axis == "rate" else float((lo + hi) // 2)
                if mid not in (lo, hi):
                    return mid
            self.phase = "confirm"
        if self.phase == "confirm":
            answer = self.best_passed()
            if answer is None or self.confirmed is not None:
                self.phase = "done"
                return None
            return answer
        return None

    def tell(self, load: float, summary: Mapping[str, Any]) -> bool:
        ok = meets(self.slo, summary)
        self.probes.append({"load": load, "phase": self.phase, "met": ok})
        if self.phase == "confirm":
            self.confirmed = ok
            if not ok:  # the repeat broke an SLO: the answer was luck; step down
                self.failed.append(load)
                self.passed = [p for p in self.passed if p < load]
            return ok
        (self.passed if ok else self.failed).append(load)
        rate = summary.get("output_throughput")
        if ok and isinstance(rate, int | float):
            self.throughput[load] = float(rate)
            if self.phase == "ladder":
                self.flat = [*self.flat, load] if self._plateaued(load) else []
                if self.plateau_at is not None:
                    self.probes[-1]["plateau"] = True
        return ok

    def answer(self) -> float | None:
        return self.best_passed()

    def document(self, points_at: Mapping[float, list[int]]) -> dict[str, Any]:
        answer = self.answer()
        return {
            "axis": self.axis,
            "max": self.maximum,
            "slo": dict(self.slo),
            "met": answer is not None,
            "answer": answer,
            "confirmed": bool(self.confirmed) if answer is not None else False,
            "answer_points": list(points_at.get(answer, [])) if answer is not None else [],
            "probes": self.probes,
            **({"plateau": self.plateau, "plateau_at": self.plateau_at} if self.plateau else {}),
        }


def probe_count_bound(maximum: float) -> int:
    """The most points a search can take (ladder + bisection + one confirm)."""
    steps = max(1, math.ceil(math.log2(max(2.0, maximum))))
    return 2 * steps + 2
