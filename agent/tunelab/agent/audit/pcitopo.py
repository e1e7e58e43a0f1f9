"""The PCI functions the audit cares about: NVIDIA GPUs and every bridge above each of them.

The path to the root port comes from the sysfs device path itself
(``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...``): each BDF in it is one hop, so no
bus-number arithmetic is needed and a fixture tree only has to keep sysfs' relative symlinks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from tunelab.agent.audit.pciconfig import ConfigSpace, ConfigSpaceError, decode
from tunelab.agent.system import System

NVIDIA_VENDOR = 0x10DE
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
DEVICES = "/sys/bus/pci/devices"


@dataclass
class PciFunction:
    """One function's sysfs attributes, read once."""

    system: System = field(repr=False)
    bdf: str

    @property
    def sysfs(self) -> str:
        return f"{DEVICES}/{self.bdf}"

    def attr(self, name: str) -> str | None:
        return self.system.read_attr(f"{self.sysfs}/{name}")

    @cached_property
    def vendor(self) -> int | None:
        return _hex(self.system.read_attr(f"{self.sysfs}/vendor"))

    @cached_property
    def device(self) -> int | None:
        return _hex(self.system.read_attr(f"{self.sysfs}/device"))

    @cached_property
    def pci_class(self) -> int | None:
        return _hex(self.system.read_attr(f"{self.sysfs}/class"))

    @cached_property
    def config_bytes(self) -> bytes | None:
        return self.system.read_bytes(f"{self.sysfs}/config")

    @cached_property
    def config(self) -> ConfigSpace | ConfigSpaceError | None:
        """The decoded config space, the decode error, or None when the file is unreadable."""
        raw = self.config_bytes
        if raw is None:
            return None
        try:
            return decode(raw)
        except ConfigSpaceError as exc:
            return exc

    @property
    def is_gpu(self) -> bool:
        """NVIDIA display controller (VGA 0x0300 or 3D 0x0302); NVSwitches (0x0680) are not."""
        return self.vendor == NVIDIA_VENDOR and (self.pci_class or 0) >> 16 == 0x03

    @cached_property
    def upstream(self) -> list[str]:
        """BDFs of the bridges above this function, nearest first (root port last)."""
        real = self.system.realpath(self.sysfs)
        hops = [part for part in real.split("/") if BDF.match(part)]
        if not hops or hops[-1] != self.bdf:
            return []
        return list(reversed(hops[:-1]))


class PciTree:
    """All functions under ``/sys/bus/pci/devices``, created lazily and shared by the checks."""

    def __init__(self, system: System) -> None:
        self.system = system
        self._functions: dict[str, PciFunction] = {}
        self.bdfs = [name for name in system.names(DEVICES) if BDF.match(name)]

    def function(self, bdf: str) -> PciFunction:
        if bdf not in self._functions:
            self._functions[bdf] = PciFunction(self.system, bdf)
        return self._functions[bdf]

    @cached_property
    def gpus(self) -> list[PciFunction]:
        return [f for f in (self.function(b) for b in self.bdfs) if f.is_gpu]

    @cached_property
    def nvswitches(self) -> list[PciFunction]:
        """NVIDIA functions of class bridge/other (0x0680): the NVSwitches of an HGX board."""
        return [
            f
            for f in (self.function(b) for b in self.bdfs)
            if f.vendor == NVIDIA_VENDOR and (f.pci_class or 0) >> 8 == 0x0680
        ]

    def chain(self, gpu: PciFunction) -> list[PciFunction]:
        """The GPU, then each bridge above it up to the root port."""
        return [gpu, *(self.function(b) for b in gpu.upstream)]


def _hex(text: str | None) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def parse_link_speed(text: str | None) -> float | None:
    """``"16.0 GT/s PCIe"`` / ``"16 GT/s"`` → 16.0; ``Unknown`` or garbage → None."""
    if not text:
        return None
    head = text.split()[0]
    try:
        value = float(head)
    except ValueError:
        return None
    return value if value > 0 else None


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:00:06.0`` → sysfs' ``0000:00:06.0``."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else text
