"""GPU energy as a counter that is exact when read and fresh between reads.

NVML's total-energy counter is the truth, but one read blocks ~3-4 ms per GPU (the H200
capture), so it is read at the fast cadence only on GPUs that have work (a compute process, or
a run of the agent in progress), and at the slow cadence otherwise. Between two reads the
counter advances at the last power reading (read every fast tick, a few µs), integrated by the
trapezoid rule, and a scrape extrapolates from the newest reading to the moment it is served
(with the power read at that moment when ``live_power`` is given), at most
``max_extrapolation`` seconds. A counter that stood still while power was drawn (a replayed
snapshot) is not advanced at all. Every read of the real counter re-anchors the estimate, and
the gap it closed is kept as ``tunelab_gpu_energy_estimate_error_joules`` (the cross-check).

The served value never goes backwards: if a re-anchor lands below what was already served, the
counter holds until the real one passes it. Only a real counter that drops (driver reload)
resets it, which Prometheus treats as a counter reset.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import Metric

from tunelab.agent.metrics.families import FamilyCollector, counter, gauge


@dataclass
class _GpuEnergy:
    uuid: str
    anchor: float  # joules at ``at``: the counter, or the counter plus integrated power
    at: float  # clock time of the anchor
    power: float | None  # watts at ``at``
    counter: float  # the last real counter value
    served: float = 0.0  # the highest value any scrape was given
    error: float | None = None  # estimate minus counter at the last re-anchor
    stuck: bool = False  # the counter stood still while power was drawn (a replayed snapshot)
    reads: int = 1  # real counter reads so far


class EnergyTracker:
    """Per-GPU energy estimates, updated by the sampler thread, read by scrape threads."""

    def __init__(
        self,
        max_extrapolation: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        live_power: Callable[[int], float | None] | None = None,
    ) -> None:
        self.max_extrapolation = max_extrapolation
        self.clock = clock
        self.live_power = live_power
        self._lock = threading.Lock()
        self._gpus: dict[int, _GpuEnergy] = {}

    def update(
        self, index: int, uuid: str, *, power: float | None, counter: float | None, at: float
    ) -> None:
        """One sampler reading of GPU ``index``: its power, and its counter when it was read."""
        with self._lock:
            state = self._gpus.get(index)
            if state is None or state.uuid != uuid:
                if counter is not None:
                    self._gpus[index] = _GpuEnergy(uuid, counter, at, power, counter, counter)
                return
            estimate = state.anchor
            if not state.stuck and state.power is not None and power is not None and at > state.at:
                estimate += (state.power + power) / 2 * (at - state.at)
            if counter is None:
                state.anchor, state.at, state.power = estimate, at, power
                return
            if counter < state.counter:  # the driver reloaded: a real reset
                self._gpus[index] = _GpuEnergy(uuid, counter, at, power, counter, counter)
                return
            state.reads += 1
            drawn = (state.power or 0.0) > 0 and at > state.at
            state.stuck = counter == state.counter and drawn
            if not state.stuck:
                state.error = estimate - counter
            state.anchor, state.at, state.power, state.counter = counter, at, power, counter

    def calibrating(self, index: int) -> bool:
        """True until the counter was read twice: whether it moves at all is not known yet."""
        with self._lock:
            state = self._gpus.get(index)
            return state is None or state.reads < 2

    def forget(self, keep: int) -> None:
        """Drop GPUs with an index >= ``keep`` (they are gone from NVML)."""
        with self._lock:
            for index in [i for i in self._gpus if i >= keep]:
                del self._gpus[index]

    def value(self, index: int) -> float | None:
        """The counter as of now (never below what was served before); None before a read.

        From the newest reading to now, the trapezoid of its power and the power read now
        (``live_power``, a few µs) when there is one, else its power alone.
        """
        now = self.clock()
        live = self.live_power(index) if self.live_power is not None else None
        with self._lock:
            state = self._gpus.get(index)
            if state is None:
                return None
            ahead = min(max(0.0, now - state.at), self.max_extrapolation)
            power = state.power or 0.0
            if live is not None and state.power is not None:
                power = (state.power + live) / 2
            current = state.anchor if state.stuck else state.anchor + power * ahead
            state.served = max(state.served, current)
            return state.served

    def readings(self) -> list[tuple[int, str, float, float | None]]:
        """(index, uuid, counter now, last cross-check error) for every GPU with a counter."""
        with self._lock:
            known = sorted((i, s.uuid, s.error) for i, s in self._gpus.items())
        out = []
        for index, uuid, error in known:
            value = self.value(index)
            if value is not None:
                out.append((index, uuid, value, error))
        return out


ENERGY = counter(
    "tunelab_gpu_energy_joules_total",
    "Energy since the driver loaded: NVML's counter, read every fast tick while the GPU has "
    "work, advanced at the measured power between reads.",
    "gpu",
    "uuid",
)
ESTIMATE_ERROR = gauge(
    "tunelab_gpu_energy_estimate_error_joules",
    "At the last real counter read: the running estimate minus the counter (cross-check).",
    "gpu",
    "uuid",
)
LIVE_FAMILIES = frozenset({"tunelab_gpu_energy_joules"})  # rendered per scrape, never cached


class EnergyCollector(FamilyCollector):
    families = (ENERGY, ESTIMATE_ERROR)

    def __init__(self, tracker: EnergyTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterable[Metric]:
        out = self.samples()
        for index, uuid, value, error in self._tracker.readings():
            out.add(ENERGY.name, [str(index), uuid], value)
            out.add(ESTIMATE_ERROR.name, [str(index), uuid], error)
        return out.families()
