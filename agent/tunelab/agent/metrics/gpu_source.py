"""What the sampler reads from the GPUs, each field at the cadence ``agent.gpu.FIELDS`` gives it.

A field the GPU does not support reads as None and stays None, so its series is absent. A read
that fails for another reason also leaves the field None (a stale value would be a lie) and
makes the cycle count as failed, so the sample age on /metrics stops being refreshed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from tunelab.agent.gpu import Cadence, FieldValue, GpuBackend, GpuError, GpuProcess, fields_with

_EMPTY: Mapping[str, FieldValue] = MappingProxyType({})


@dataclass(frozen=True)
class GpuSample:
    """Every GPU's latest fields (merged over cadences) and the compute processes."""

    system: Mapping[str, FieldValue] = field(default_factory=lambda: _EMPTY)
    devices: tuple[Mapping[str, FieldValue], ...] = ()
    processes: tuple[GpuProcess, ...] = ()


class GpuSource:
    """Samples a :class:`GpuBackend`; does nothing at all on a host without GPUs."""

    name = "gpu"

    def __init__(self, backend: GpuBackend) -> None:
        self.backend = backend
        self.enabled = backend.available()
        self.cadences = (
            frozenset({Cadence.STATIC, Cadence.FAST, Cadence.SLOW}) if self.enabled else frozenset()
        )
        self.latest = GpuSample()

    def sample(self, cadence: Cadence) -> None:
        names = fields_with(cadence)
        current = self.latest
        system = current.system
        count = len(current.devices)
        if cadence is Cadence.STATIC:
            system = MappingProxyType(dict(self.backend.system()))
            count = self.backend.device_count()
        failures: list[str] = []
        devices = []
        for index in range(count):
            values = dict(current.devices[index]) if index < len(current.devices) else {}
            for name in names:
                try:
                    values[name] = self.backend.read(index, name)
                except GpuError as exc:
                    values[name] = None
                    failures.append(f"gpu {index} {name}: {exc}")
            devices.append(MappingProxyType(values))
        processes = current.processes
        if cadence is Cadence.FAST:
            try:
                processes = tuple(self.backend.compute_processes())
            except GpuError as exc:
                processes = ()
                failures.append(f"compute processes: {exc}")
        self.latest = replace(current, system=system, devices=tuple(devices), processes=processes)
        if failures:
            more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
            raise GpuError(failures[0] + more)
