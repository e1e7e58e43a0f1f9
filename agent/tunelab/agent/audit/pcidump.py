"""Read ``lspci -xxx``/``-xxxx`` text back into config-space bytes.

Public lspci dumps (pciutils' own test inputs, bug reports) are the widest source of real
config-space bytes; this turns them into the ``config`` files a fixture tree needs, and lets the
decoder be checked against the lines lspci printed next to the hex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DEVICE = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])\s")
_ROW = re.compile(r"^([0-9a-f]{2,3}): ((?:[0-9a-f]{2} ){15}[0-9a-f]{2})\s*$")


class DumpError(ValueError):
    """The text is not an lspci hex dump (names the line)."""


@dataclass
class DumpedFunction:
    bdf: str  # always with the domain: 0000:07:00.0
    title: str
    text: list[str] = field(default_factory=list)  # lspci's decoded lines, for cross-checks
    rows: dict[int, bytes] = field(default_factory=dict)

    @property
    def config(self) -> bytes:
        """Rows joined from offset 0; a gap means the dump is not a contiguous read."""
        data = bytearray()
        for offset in sorted(self.rows):
            if offset != len(data):
                raise DumpError(f"{self.bdf}: hex rows jump from 0x{len(data):x} to 0x{offset:x}")
            data += self.rows[offset]
        return bytes(data)


def parse_dump(text: str) -> list[DumpedFunction]:
    """Every function in an lspci dump, in order of appearance."""
    functions: list[DumpedFunction] = []
    current: DumpedFunction | None = None
    for number, line in enumerate(text.splitlines(), 1):
        head = _DEVICE.match(line)
        if head:
            domain = head.group(1) or "0000"
            bdf = f"{domain}:{head.group(2)}:{head.group(3)}.{head.group(4)}"
            current = DumpedFunction(bdf, line[head.end() :].strip())
            functions.append(current)
            continue
        row = _ROW.match(line)
        if row:
            if current is None:
                raise DumpError(f"line {number}: hex row before any device line")
            current.rows[int(row.group(1), 16)] = bytes.fromhex(row.group(2))
        elif current is not None and line.startswith("\t"):
            current.text.append(line.strip())
    return functions
