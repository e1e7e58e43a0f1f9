"""The one place that reads sysfs, procfs, /etc and /dev — always through a root path.

Production uses root ``/``; tests and ``audit --root DIR`` point it at a captured tree, so every
check and host collector runs unchanged against a fixture. Paths given to :class:`System` are
absolute host paths (``/proc/devices``); they are re-rooted here and nowhere else.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# Where a captured tree keeps what a copy of files cannot hold: device numbers and open() results.
CAPTURE_DIR = ".tunelab-capture"


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
        return self.path(host_path).exists() or host_path in self._node_record

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
        """Sorted entry names; empty when the directory is absent.

        In a captured tree, the device nodes its capture recorded are listed too: git keeps no
        device nodes, so a checked-out capture has only their record.
        """
        try:
            names = {entry.name for entry in self.path(host_path).iterdir()}
        except OSError:
            names = set()
        folder = "/" + host_path.strip("/")
        for node in self._node_record:
            parent, _, name = node.rpartition("/")
            if parent == folder:
                names.add(name)
            elif parent.startswith(folder.rstrip("/") + "/"):
                names.add(parent[len(folder.rstrip("/")) + 1 :].split("/")[0])
        return sorted(names)

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
            recorded = self._node_record.get(host_path)
            if recorded is None:
                return None
            return DeviceNode(
                host_path,
                recorded.get("type") == "c",
                int(recorded["major"]),
                int(recorded["minor"]),
            )
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

    # --- appended for the host audit ----------------------------------------------------------

    @property
    def is_live(self) -> bool:
        """True when this view reads the running host (root ``/``), not a captured tree."""
        return self.root.resolve() == Path("/")

    def is_dir(self, host_path: str) -> bool:
        folder = "/" + host_path.strip("/") + "/"
        return self.path(host_path).is_dir() or any(n.startswith(folder) for n in self._node_record)

    def open_device(self, host_path: str) -> int:
        """Open a device node read-write and close it at once; 0 or the errno it failed with.

        The errno is the evidence (EPERM: device cgroup, ENXIO: no driver on that major). A
        captured tree cannot reproduce the captured kernel's answer, so a capture records it in
        ``CAPTURE_DIR/dev-open.json`` and that record is returned instead of asking this kernel.
        """
        if not self.is_live:
            recorded = self._recorded_open_errno(host_path)
            if recorded is not None:
                return recorded
        try:
            fd = os.open(self.path(host_path), os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            return exc.errno or -1
        os.close(fd)
        return 0

    @cached_property
    def _node_record(self) -> dict[str, dict[str, int | str]]:
        """``CAPTURE_DIR/dev-nodes.json`` of a captured tree (``{path: {type, major, minor}}``)."""
        if self.is_live:
            return {}
        try:
            data = json.loads(self.path(f"/{CAPTURE_DIR}/dev-nodes.json").read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {
            str(path): node
            for path, node in data.items()
            if isinstance(node, dict)
            and isinstance(node.get("major"), int)
            and isinstance(node.get("minor"), int)
        }

    def _recorded_open_errno(self, host_path: str) -> int | None:
        return self._open_record.get(host_path)

    @cached_property
    def _open_record(self) -> dict[str, int]:
        """``{"/dev/nvidia0": "EPERM" | 0, ...}`` as written by a capture; empty when absent."""
        text = self.read_text(f"/{CAPTURE_DIR}/dev-open.json")
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            return {}
        record: dict[str, int] = {}
        for path, value in data.items():
            if isinstance(value, int):
                record[str(path)] = value
            elif isinstance(value, str) and isinstance(getattr(errno, value, None), int):
                record[str(path)] = int(getattr(errno, value))
        return record

    def read_attr(self, host_path: str) -> str | None:
        """A sysfs/procfs attribute (first 64 KiB) stripped, or None when absent or unreadable.

        Plain ``os.read``: auditing a 128-CPU host reads thousands of attributes, and the text
        file layer costs five times the system calls themselves.
        """
        try:
            fd = os.open(self.path(host_path), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            data = os.read(fd, 65536)
        except OSError:
            return None
        finally:
            os.close(fd)
        return data.decode(errors="replace").strip()

    def names(self, host_path: str) -> list[str]:
        """Like :meth:`listdir` (sorted, empty when absent) without pathlib's per-entry cost."""
        try:
            return sorted(os.listdir(self.path(host_path)))  # noqa: PTH208 (names only, fast)
        except OSError:
            return []

    # --- appended for issue 16's checks -----------------------------------------------------

    def process_names(self) -> dict[int, str]:
        """pid -> ``comm`` of every process this view can see (a container sees only its own)."""
        found: dict[int, str] = {}
        for name in self.names("/proc"):
            if name.isdigit():
                comm = self.read_attr(f"/proc/{name}/comm")
                if comm:
                    found[int(name)] = comm
        return found

    def capture_record(self, name: str) -> object:
        """A capture's JSON record ``CAPTURE_DIR/name`` (what a copy of files cannot hold)."""
        text = self.read_text(f"/{CAPTURE_DIR}/{name}")
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None


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


def format_cpu_list(numbers: list[int]) -> str:
    """The inverse of :func:`parse_cpu_list`: ``[0, 1, 2, 5]`` -> ``"0-2,5"`` (also for ports)."""
    parts: list[str] = []
    for number in sorted(set(numbers)):
        if parts and int(parts[-1].rpartition("-")[2]) == number - 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{number}"
        else:
            parts.append(str(number))
    return ",".join(parts)
