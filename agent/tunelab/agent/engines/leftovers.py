"""Files a server's processes leave behind: shared memory in /dev/shm and unix socket files.

vLLM 0.32 leaves its ZeroMQ ipc sockets (``/tmp/<uuid>``) even after a clean stop, and a SIGKILLed
process leaves its ``psm_*`` ring buffers in /dev/shm. A file is the server's only when one of the
server's own processes was seen holding it: mapped (``/proc/PID/maps``) or open
(``/proc/PID/fd``) for /dev/shm, bound (a socket inode in its fds, named in ``/proc/net/unix``)
for sockets. At removal each file must still be the same inode, of the same type, changed no
earlier than the server's start, and not have existed before the spawn: this runs as root, so it
never follows a symlink and never removes a directory or a file that only looks similar.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_TRACKED = 4096  # a server that makes more files than this is not cleaned past it
MAX_FDS_PER_PROCESS = 65536
CTIME_SLACK = 2.0  # seconds: file ctime vs the recorded start time


@dataclass(frozen=True)
class Tracked:
    path: str
    dev: int
    ino: int
    kind: int  # stat.S_IFREG or stat.S_IFSOCK


class LeftoverTracker:
    """``scan`` the live processes now and then (and just before a stop); ``remove`` once every
    process is gone."""

    def __init__(
        self,
        started_at: float,
        shm_dir: Path = Path("/dev/shm"),  # noqa: S108 - the system's shm mount, read-only use
        proc: Path = Path("/proc"),
        snapshot: bool = True,
    ) -> None:
        self.started_at = started_at
        self.shm_dir = shm_dir
        self.proc = proc
        self.tracked: dict[str, Tracked] = {}
        self._before: set[tuple[int, int]] = _entries(shm_dir) if snapshot else set()

    def scan(self, pids: Iterable[int]) -> None:
        sockets: set[int] = set()
        for pid in pids:
            if pid <= 1:
                continue
            for path in self._shm_paths(pid):
                self._track(path, stat.S_IFREG)
            sockets |= self._socket_inodes(pid)
        if sockets:
            for path in self._bound_paths(sockets):
                self._track(path, stat.S_IFSOCK)

    def remove(self) -> list[str]:
        """Unlink what is still exactly what was tracked; the paths removed."""
        removed = []
        for item in sorted(self.tracked.values(), key=lambda t: t.path):
            try:
                st = os.lstat(item.path)
            except OSError:
                continue  # already gone: the engine cleaned up after itself
            if (st.st_dev, st.st_ino) != (item.dev, item.ino) or stat.S_IFMT(
                st.st_mode
            ) != item.kind:
                continue
            if (
                st.st_ctime < self.started_at - CTIME_SLACK
                or (st.st_dev, st.st_ino) in self._before
            ):
                continue
            try:
                Path(item.path).unlink()
            except OSError:
                continue
            removed.append(item.path)
        self.tracked.clear()
        return removed

    # --- reading /proc ---------------------------------------------------------------------------
    def _track(self, path: str, kind: int) -> None:
        if path in self.tracked or len(self.tracked) >= MAX_TRACKED or not path.startswith("/"):
            return
        try:
            st = os.lstat(path)
        except OSError:
            return
        if stat.S_IFMT(st.st_mode) != kind or (st.st_dev, st.st_ino) in self._before:
            return
        self.tracked[path] = Tracked(path, st.st_dev, st.st_ino, kind)

    def _shm_paths(self, pid: int) -> set[str]:
        prefix = str(self.shm_dir).rstrip("/") + "/"
        found: set[str] = set()
        try:
            with open(self.proc / str(pid) / "maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    path = line.rstrip("\n").split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                    path = path.removesuffix(" (deleted)")
                    if path.startswith(prefix) and "/" not in path[len(prefix) :]:
                        found.add(path)
        except OSError:
            pass
        for target in self._fd_targets(pid):
            if target.startswith(prefix) and "/" not in target[len(prefix) :]:
                found.add(target)
        return found

    def _socket_inodes(self, pid: int) -> set[int]:
        out = set()
        for target in self._fd_targets(pid):
            if target.startswith("socket:[") and target.endswith("]"):
                try:
                    out.add(int(target[8:-1]))
                except ValueError:
                    continue
        return out

    def _fd_targets(self, pid: int) -> list[str]:
        fd_dir = self.proc / str(pid) / "fd"
        out: list[str] = []
        try:
            for i, link in enumerate(fd_dir.iterdir()):
                if i >= MAX_FDS_PER_PROCESS:
                    break
                try:
                    out.append(str(link.readlink()))
                except OSError:
                    continue
        except OSError:
            return out
        return out

    def _bound_paths(self, inodes: set[int]) -> set[str]:
        """Paths of the unix sockets with these inodes (``/proc/net/unix``: Num RefCount Protocol
        Flags Type St Inode Path); abstract names (``@...``) have no file."""
        found: set[str] = set()
        try:
            with open(self.proc / "net" / "unix", encoding="utf-8", errors="replace") as f:
                next(f, None)
                for line in f:
                    parts = line.split(maxsplit=7)
                    if len(parts) == 8 and parts[6].isdigit() and int(parts[6]) in inodes:
                        found.add(parts[7].strip())
        except OSError:
            pass
        return {p for p in found if p.startswith("/")}


def _entries(directory: Path) -> set[tuple[int, int]]:
    out = set()
    try:
        with os.scandir(directory) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out.add((st.st_dev, st.st_ino))
    except OSError:
        pass
    return out
