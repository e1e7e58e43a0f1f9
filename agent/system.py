"""The one place that reads sysfs, procfs, /etc and /dev — always through a root path.

Production uses root ``/``; tests and ``audit --root DIR`` point it at a captured tree, so every
check and host collector runs unchanged against a fixture. Paths given to :class:`System` are
absolute host paths (``/proc/devices``); they are re-rooted here and nowhere else.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DeviceNode:
    """A /dev entry as ``ls -l`` would show it."""

    path: str
    is_char: bool
    major: int
    minor: int


class System:
    """Read-only view of one host's kernel interfaces under ``root``."""

    def __init__(self, root: Path | str = "/") -> None:
        self.root = Path(root)

    def path(self, host_path: str) -> Path:
        """The real filesystem path of ``host_path`` under this root."""
        return self.root / host_path.lstrip("/")

    def exists(self, host_path: str) -> bool:
        return self.path(host_path).exists()

    def read_text(self, host_path: str) -> str | None:
        """File contents, or None when it does not exist or cannot be read."""
        try:
            return self.path(host_path).read_text(errors="replace")
        except OSError:
            return None

    def read_line(self, host_path: str) -> str | None:
        """First line, stripped: the shape of almost every sysfs attribute."""
        text = self.read_text(host_path)
        return None if text is None else text.strip()

    def read_int(self, host_path: str, base: int = 10) -> int | None:
        line = self.read_line(host_path)
        if line is None:
            return None
        try:
            return int(line, base)
        except ValueError:
            return None

    def read_bytes(self, host_path: str) -> bytes | None:
        try:
            return self.path(host_path).read_bytes()
        except OSError:
            return None

    def listdir(self, host_path: str) -> list[str]:
        """Sorted entry names; empty when the directory is absent."""
        try:
            return sorted(entry.name for entry in self.path(host_path).iterdir())
        except OSError:
            return []

    def readlink(self, host_path: str) -> str | None:
        try:
            return str(self.path(host_path).readlink())
        except OSError:
            return None

    def realpath(self, host_path: str) -> str:
        """Resolve symlinks inside the root and return a host path again."""
        resolved = self.path(host_path).resolve()
        try:
            return "/" + str(resolved.relative_to(self.root.resolve()))
        except ValueError:
            return str(resolved)

    def device_node(self, host_path: str) -> DeviceNode | None:
        """Type and numbers of a /dev node, or None when it does not exist."""
        try:
            st = self.path(host_path).lstat()
        except OSError:
            return None
        is_char = stat.S_ISCHR(st.st_mode)
        rdev = st.st_rdev if is_char or stat.S_ISBLK(st.st_mode) else 0
        return DeviceNode(host_path, is_char, os.major(rdev), os.minor(rdev))

    def online_cpus(self) -> list[int]:
        """CPU numbers from /sys/devices/system/cpu/online (ranges like ``0-3,8-11``)."""
        text = self.read_line("/sys/devices/system/cpu/online")
        if text:
            return parse_cpu_list(text)
        return sorted(
            int(name[3:])
            for name in self.listdir("/sys/devices/system/cpu")
            if name.startswith("cpu") and name[3:].isdigit()
        )


def parse_cpu_list(text: str) -> list[int]:
    """Parse the kernel's cpulist format (``0-3,8,10-11``)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.extend(range(int(low), int(high) + 1))
        else:
            cpus.append(int(part))
    return cpus
