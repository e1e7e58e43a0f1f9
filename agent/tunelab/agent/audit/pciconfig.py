"""PCI configuration space, decoded from the bytes of ``/sys/bus/pci/devices/*/config``.

Every register is found by walking the capability lists (standard from 0x34, extended from
0x100); no offset is assumed, because the PCIe capability sits at a different place on every
device (0x60 on a ConnectX-3, 0x68 on a PLX switch, 0x78 on a GP108M). Without CAP_SYS_ADMIN in
the initial user namespace the kernel hands out only the first 64 bytes; that case is reported as
:class:`Truncated`, never guessed around.

Field layouts follow the PCI Express Base Specification (and Linux ``pci_regs.h``).
"""

from __future__ import annotations

import shlex
import struct
from dataclasses import dataclass

CAP_ID_EXP = 0x10  # PCI Express capability
ECAP_ID_ACS = 0x000D  # Access Control Services
STATUS_CAP_LIST = 0x10
HEADER_BYTES = 64
MAX_CAPS = 48  # the standard list fits 48 4-byte capabilities at most; more is a loop
MAX_ECAPS = 1024

PORT_TYPES = {
    0: "endpoint",
    1: "legacy endpoint",
    4: "root port",
    5: "switch upstream port",
    6: "switch downstream port",
    7: "PCIe-to-PCI bridge",
    8: "PCI-to-PCIe bridge",
    9: "root complex integrated endpoint",
    10: "root complex event collector",
}
LINK_SPEEDS_GT = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
ACS_BITS = (
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
)
# DevCtl: MaxPayload bits 7:5, MaxReadReq bits 14:12; bit 15 is Initiate-FLR on an endpoint.
DEVCTL_PAYLOAD_MASK = 0x00E0
DEVCTL_READRQ_MASK = 0x7000
DEVCTL_FLR_BIT = 0x8000


class ConfigSpaceError(ValueError):
    """The bytes do not hold what a PCI function's config space must (a corrupt read)."""


@dataclass(frozen=True)
class Truncated:
    """Only ``size`` bytes were readable: the capability lists lie beyond them."""

    size: int


@dataclass(frozen=True)
class PcieCap:
    """The PCI Express capability registers the audit needs, and where they were found."""

    offset: int
    port_type: int
    devcap: int
    devctl: int
    lnkcap: int
    lnksta: int

    @property
    def port_type_name(self) -> str:
        return PORT_TYPES.get(self.port_type, f"type {self.port_type}")

    @property
    def max_payload(self) -> int:
        return 128 << ((self.devctl & DEVCTL_PAYLOAD_MASK) >> 5)

    @property
    def max_payload_supported(self) -> int:
        return 128 << (self.devcap & 0x7)

    @property
    def max_read_request(self) -> int:
        return 128 << ((self.devctl & DEVCTL_READRQ_MASK) >> 12)

    @property
    def link_speed_max(self) -> float | None:
        return LINK_SPEEDS_GT.get(self.lnkcap & 0xF)

    @property
    def link_width_max(self) -> int:
        return (self.lnkcap >> 4) & 0x3F

    @property
    def link_speed(self) -> float | None:
        return LINK_SPEEDS_GT.get(self.lnksta & 0xF)

    @property
    def link_width(self) -> int:
        return (self.lnksta >> 4) & 0x3F


@dataclass(frozen=True)
class AcsCap:
    offset: int
    capability: int
    control: int

    @property
    def enabled(self) -> list[str]:
        return [name for bit, name in enumerate(ACS_BITS) if self.control & (1 << bit)]


@dataclass(frozen=True)
class ConfigSpace:
    """Decoded view of one function's config-space bytes."""

    raw: bytes

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def vendor_id(self) -> int:
        return self._u16(0x00)

    @property
    def device_id(self) -> int:
        return self._u16(0x02)

    @property
    def header_type(self) -> int:
        return self.raw[0x0E] & 0x7F

    def capabilities(self) -> list[tuple[int, int]]:
        """``(offset, id)`` of every standard capability, in list order."""
        if self.size <= HEADER_BYTES:
            return []
        if not self._u16(0x06) & STATUS_CAP_LIST:
            return []
        found: list[tuple[int, int]] = []
        seen: set[int] = set()
        pointer = self.raw[0x34] & 0xFC
        while pointer and len(found) < MAX_CAPS:
            if pointer in seen or pointer < HEADER_BYTES or pointer + 2 > self.size:
                raise ConfigSpaceError(f"capability list broken at 0x{pointer:02x}")
            seen.add(pointer)
            found.append((pointer, self.raw[pointer]))
            pointer = self.raw[pointer + 1] & 0xFC
        return found

    def extended_capabilities(self) -> list[tuple[int, int]]:
        """``(offset, id)`` of every extended capability; the chain need not be ascending."""
        if self.size < 0x104:
            return []
        found: list[tuple[int, int]] = []
        seen: set[int] = set()
        offset = 0x100
        while offset and len(found) < MAX_ECAPS:
            if offset in seen or offset < 0x100 or offset + 4 > self.size:
                raise ConfigSpaceError(f"extended capability list broken at 0x{offset:03x}")
            seen.add(offset)
            header = self._u32(offset)
            if header in (0, 0xFFFFFFFF):
                break
            found.append((offset, header & 0xFFFF))
            offset = (header >> 20) & 0xFFC
        return found

    def pcie(self) -> PcieCap | Truncated | None:
        """The PCIe capability; Truncated when it cannot be reached; None on plain PCI."""
        if self.size <= HEADER_BYTES:
            return Truncated(self.size)
        for offset, cap_id in self.capabilities():
            if cap_id == CAP_ID_EXP:
                if offset + 0x14 > self.size:
                    raise ConfigSpaceError(f"PCIe capability at 0x{offset:02x} runs past the end")
                return PcieCap(
                    offset=offset,
                    port_type=(self._u16(offset + 2) >> 4) & 0xF,
                    devcap=self._u32(offset + 4),
                    devctl=self._u16(offset + 8),
                    lnkcap=self._u32(offset + 0x0C),
                    lnksta=self._u16(offset + 0x12),
                )
        return None

    def acs(self) -> AcsCap | Truncated | None:
        if self.size <= 0x100:
            return Truncated(self.size)
        for offset, cap_id in self.extended_capabilities():
            if cap_id == ECAP_ID_ACS:
                return AcsCap(offset, self._u16(offset + 4), self._u16(offset + 6))
        return None

    def _u16(self, offset: int) -> int:
        value: int = struct.unpack_from("<H", self.raw, offset)[0]
        return value

    def _u32(self, offset: int) -> int:
        value: int = struct.unpack_from("<I", self.raw, offset)[0]
        return value


def decode(raw: bytes) -> ConfigSpace:
    if len(raw) < HEADER_BYTES:
        raise ConfigSpaceError(f"config space is {len(raw)} bytes; a header needs 64")
    return ConfigSpace(raw)


def readrq_code(size: int) -> int:
    """MaxReadReq size in bytes → its 3-bit DevCtl code (128 → 0 ... 4096 → 5)."""
    if size not in (128, 256, 512, 1024, 2048, 4096):
        raise ValueError(f"MaxReadReq must be a power of two from 128 to 4096, not {size}")
    return (size // 128).bit_length() - 1


def setpci_readrq_command(bdf: str, size: int) -> str:
    """A masked write of DevCtl's MaxReadReq field only (bits 14:12).

    ``value:mask`` makes setpci read-modify-write, so the FLR bit (15) and every other bit keep
    their value; the capability is addressed by name so no offset is assumed.
    """
    value = readrq_code(size) << 12
    mask = DEVCTL_READRQ_MASK
    if value & DEVCTL_FLR_BIT or mask & DEVCTL_FLR_BIT:  # impossible by construction; kept loud
        raise ValueError("refusing a DevCtl write that could initiate a function-level reset")
    return f"setpci -s {shlex.quote(bdf)} CAP_EXP+8.w={value:04x}:{mask:04x}"
