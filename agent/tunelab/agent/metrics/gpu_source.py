"""What the sampler reads from the GPUs, each field at the cadence ``agent.gpu.FIELDS`` gives it.

A field the GPU does not support reads as None and stays None, so its series is absent. A read
that fails for another reason also leaves the field None (a stale value would be a lie) and
makes the cycle count as failed, so the sample age on /metrics stops being refreshed.

Energy is special (see ``metrics.energy``): every fast cycle hands each GPU's power to the
:class:`EnergyTracker`, and the counter itself is read at the fast cadence on GPUs with work
(``energy_fast``), else with the slow fields.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import structlog

from tunelab.agent.gpu import (
    Cadence,
    FieldValue,
    GpuBackend,
    GpuError,
    GpuProcess,
    as_float,
    fields_with,
)
from tunelab.agent.metrics.energy import EnergyTracker

log = structlog.get_logger(__name__)
ENERGY = "energy_joules"

_EMPTY: Mapping[str, FieldValue] = MappingProxyType({})


@dataclass(frozen=True)
class GpuSample:
    """Every GPU's latest fields (merged over cadences) and the compute processes."""

    system: Mapping[str, FieldValue] = field(default_factory=lambda: _EMPTY)
    devices: tuple[Mapping[str, FieldValue], ...] = ()
    processes: tuple[GpuProcess, ...] = ()


class GpuSource:
    """Samples a :class:`GpuBackend`; does nothing at all on a host without GPUs.

    ``busy()`` says whether a run of the agent is in progress: then every GPU counts as having
    work (its server may not have opened its CUDA context yet, and the run's energy must be
    exact). A live server that is not being measured counts only where NVML lists a compute
    process: an idle READY server costs no counter reads (issue 22: 0.5 % of a core on the
    H200). ``energy_fast`` False keeps the counter at the slow cadence and leaves the fast ticks
    to power integration alone.
    """

    name = "gpu"

    def __init__(
        self,
        backend: GpuBackend,
        energy: EnergyTracker | None = None,
        busy: Callable[[], bool] = lambda: False,
        energy_fast: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.enabled = backend.available()
        self.cadences = (
            frozenset({Cadence.STATIC, Cadence.FAST, Cadence.SLOW}) if self.enabled else frozenset()
        )
        self.latest = GpuSample()
        self.energy = energy or EnergyTracker(clock=clock)
        self.busy = busy
        self.energy_fast = energy_fast
        self.clock = clock
        self.energy_reads = 0  # counter reads so far (the cost the fast cadence adds)
        self._energy_read_fast: set[int] = set()
        self._warned_v1 = False

    def sample(self, cadence: Cadence) -> None:
        names = [n for n in fields_with(cadence) if n != ENERGY]
        current = self.latest
        system = current.system
        count = len(current.devices)
        if cadence is Cadence.STATIC:
            system = MappingProxyType(dict(self.backend.system()))
            count = self.backend.device_count()
            self.energy.forget(count)
        failures: list[str] = []
        processes = current.processes
        if cadence is Cadence.FAST:
            try:
                processes = tuple(self.backend.compute_processes())
            except GpuError as exc:
                processes = ()
                failures.append(f"compute processes: {exc}")
        with_work = self._with_work(cadence, count, processes)
        devices = []
        for index in range(count):
            values = dict(current.devices[index]) if index < len(current.devices) else {}
            for name in names:
                values[name] = self._read(index, name, failures)
            counter_read = index in with_work
            if counter_read:
                values[ENERGY] = self._read(index, ENERGY, failures)
                self.energy_reads += 1
            if cadence is not Cadence.STATIC:
                self.energy.update(
                    index,
                    str(values.get("uuid") or ""),
                    power=as_float(values.get("power_watts")),
                    counter=as_float(values.get(ENERGY)) if counter_read else None,
                    at=self.clock(),
                )
            devices.append(MappingProxyType(values))
        self.latest = replace(current, system=system, devices=tuple(devices), processes=processes)
        if cadence is Cadence.FAST:
            self._warn_memory_v1(devices)
        if failures:
            more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            raise GpuError(failures[0] + more)

    def _with_work(
        self, cadence: Cadence, count: int, processes: tuple[GpuProcess, ...]
    ) -> set[int]:
        """The GPUs whose energy counter is read in this cycle."""
        if cadence is Cadence.FAST:
            calibrating = {i for i in range(count) if self.energy.calibrating(i)}
            if not self.energy_fast:
                self._energy_read_fast = calibrating
                return calibrating
            every = self.busy()
            working = {p.gpu_index for p in processes}
            self._energy_read_fast = calibrating | {
                i for i in range(count) if every or i in working
            }
            return self._energy_read_fast
        if cadence is Cadence.SLOW:  # the GPUs this tick's fast cycle did not already read
            return {i for i in range(count) if i not in self._energy_read_fast}
        return set()

    def _read(self, index: int, name: str, failures: list[str]) -> FieldValue:
        try:
            return self.backend.read(index, name)
        except GpuError as exc:
            failures.append(f"gpu {index} {name}: {exc}")
            return None

    def _warn_memory_v1(self, devices: Sequence[Mapping[str, FieldValue]]) -> None:
        if self._warned_v1:
            return
        self._warned_v1 = True
        v1 = [
            i
            for i, d in enumerate(devices)
            if d.get("memory_used_bytes") is not None and d.get("memory_reserved_bytes") is None
        ]
        if v1:
            log.warning(
                "nvml_memory_info_v1",
                gpus=v1,
                note="no NVML v2 memory info: memory used includes the driver's reservation "
                "and tunelab_gpu_memory_reserved_bytes is absent",
            )
