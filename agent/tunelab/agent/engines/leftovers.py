"""Files a server's processes leave behind: shared memory in /dev/shm and unix socket files.

vLLM 0.32 leaves its ZeroMQ ipc sockets (``/tmp/<uuid>``) even after a clean stop, and a SIGKILLed
process leaves its ``psm_*`` ring buffers in /dev/shm. A file is the server's only when one of the
server's own processes was seen holding it: mapped (``/proc/PID/maps``) or open
(``/proc/PID/fd``) for /dev/shm, bound (a socket inode in its fds, named in ``/proc/net/unix``)
for sockets. At removal each file must still be the same inode, of the same type, changed no
earlier than the server's start, owned by the server's uid, in a folder that uid could write,
and not have existed before the spawn or the adoption: this runs as root, so it never follows a
symlink (``unlinkat`` relative to folders opened ``O_NOFOLLOW``) and never removes a directory
or a file that only looks similar (issue 23.4; ``LeftoverTracker`` has the rules).
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
    uid: int  # the uid of the server process that held it: the file must be owned by it


class LeftoverTracker:
    """``scan`` the live processes now and then (and just before a stop); ``remove`` once every
    process is gone.

    The snapshot of what existed before (``/dev/shm`` entries and every bound socket path, by
    device and inode) is taken when the tracker is made: at the spawn, and again at an adoption
    after an agent restart (``snapshot=False`` marks an adoption; it snapshots all the same, so
    a file that predates the adoption is never removed). A file is removed only when it was
    created after that snapshot and the server's start (ctime), is owned by the uid of the
    server process that held it, lies in a folder that uid could write, and is reached without
    following a symlink: each folder is opened ``O_NOFOLLOW|O_DIRECTORY`` from ``/`` and the file
    is checked and unlinked relative to it (``unlinkat``). A ``/proc/net/unix`` line is trusted
    only for an inode the server holds and only when that inode is on exactly one line: a
    newline in a socket path can forge a line, but then its inode appears twice.
    """

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
        self.adopted = not snapshot
        self.tracked: dict[str, Tracked] = {}
        self._before: set[tuple[int, int]] = _entries(shm_dir) | _socket_files(proc)

    def scan(self, pids: Iterable[int]) -> None:
        sockets: dict[int, int] = {}  # socket inode -> uid of a process holding it
        for pid in pids:
            if pid <= 1:
                continue
            uid = self._uid(pid)
            if uid is None:
                continue
            for path in self._shm_paths(pid):
                self._track(path, stat.S_IFREG, uid)
            for inode in self._socket_inodes(pid):
                sockets.setdefault(inode, uid)
        if sockets:
            for inode, path in self._bound_paths(set(sockets)).items():
                self._track(path, stat.S_IFSOCK, sockets[inode])

    def remove(self) -> list[str]:
        """Unlink what is still exactly what was tracked; the paths removed."""
        removed = []
        for item in sorted(self.tracked.values(), key=lambda t: t.path):
            if _unlink_exact(item, self.started_at - CTIME_SLACK, self._before):
                removed.append(item.path)
        self.tracked.clear()
        return removed

    # --- reading /proc ---------------------------------------------------------------------------
    def _uid(self, pid: int) -> int | None:
        try:
            return (self.proc / str(pid)).stat().st_uid  # /proc/PID belongs to its euid
        except OSError:
            return None

    def _track(self, path: str, kind: int, uid: int) -> None:
        if path in self.tracked or len(self.tracked) >= MAX_TRACKED or not path.startswith("/"):
            return
        try:
            st = os.lstat(path)
            folder = os.lstat(Path(path).parent)
        except OSError:
            return
        if stat.S_IFMT(st.st_mode) != kind or (st.st_dev, st.st_ino) in self._before:
            return
        if st.st_uid != uid or not _writable_by(folder, uid):
            return
        self.tracked[path] = Tracked(path, st.st_dev, st.st_ino, kind, uid)

    def _in_shm(self, path: str) -> bool:
        prefix = str(self.shm_dir).rstrip("/") + "/"
        return path.startswith(prefix) and "/" not in path[len(prefix) :]

    def _shm_paths(self, pid: int) -> set[str]:
        """Files in the shm dir the process maps or holds open, each confirmed by its inode:
        a name is only a claim (a file called ``X (deleted)`` must not name ``X``)."""
        found: set[str] = set()
        try:
            with open(self.proc / str(pid) / "maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.rstrip("\n").split(maxsplit=5)
                    if (
                        len(parts) == 6
                        and parts[4].isdigit()
                        and self._in_shm(parts[5])
                        and _inode_is(parts[5], int(parts[4]))
                    ):
                        found.add(parts[5])
        except OSError:
            pass
        for link, target in self._fd_targets(pid):
            if self._in_shm(target):
                try:
                    held = link.stat()  # the open file itself, through the magic link
                except OSError:
                    continue
                if _inode_is(target, held.st_ino, held.st_dev):
                    found.add(target)
        return found

    def _socket_inodes(self, pid: int) -> set[int]:
        out = set()
        for _, target in self._fd_targets(pid):
            if target.startswith("socket:[") and target.endswith("]"):
                try:
                    out.add(int(target[8:-1]))
                except ValueError:
                    continue
        return out

    def _fd_targets(self, pid: int) -> list[tuple[Path, str]]:
        fd_dir = self.proc / str(pid) / "fd"
        out: list[tuple[Path, str]] = []
        try:
            for i, link in enumerate(fd_dir.iterdir()):
                if i >= MAX_FDS_PER_PROCESS:
                    break
                try:
                    out.append((link, str(link.readlink())))
                except OSError:
                    continue
        except OSError:
            return out
        return out

    def _bound_paths(self, inodes: set[int]) -> dict[int, str]:
        """inode -> path of the unix sockets with these inodes (``/proc/net/unix``: Num RefCount
        Protocol Flags Type St Inode Path); abstract names (``@...``) have no file, and an inode
        on more than one line (a forged line) is ambiguous and left out."""
        return {
            inode: path
            for inode, paths in _unix_lines(self.proc).items()
            if inode in inodes and len(paths) == 1
            for path in paths
            if path.startswith("/")
        }


def _unix_lines(proc: Path) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    try:
        with open(proc / "net" / "unix", encoding="utf-8", errors="replace") as f:
            next(f, None)
            for line in f:
                parts = line.rstrip("\n").split(maxsplit=7)
                if len(parts) >= 7 and parts[6].isdigit():
                    lines.setdefault(int(parts[6]), []).append(parts[7] if len(parts) == 8 else "")
    except OSError:
        pass
    return lines


def _socket_files(proc: Path) -> set[tuple[int, int]]:
    """(dev, ino) of every socket file bound now: none of them is ever a leftover."""
    out = set()
    for paths in _unix_lines(proc).values():
        for path in paths:
            if path.startswith("/"):
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    out.add((st.st_dev, st.st_ino))
    return out


def _inode_is(path: str, ino: int, dev: int | None = None) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_ino == ino and (dev is None or st.st_dev == dev)


def _writable_by(folder: os.stat_result, uid: int) -> bool:
    """Whether ``uid`` could create files in a folder (its owner with u+w, or o+w for all)."""
    if not stat.S_ISDIR(folder.st_mode):
        return False
    mode = folder.st_mode
    return bool((folder.st_uid == uid and mode & stat.S_IWUSR) or mode & stat.S_IWOTH)


def _open_folder(path: str) -> int:
    """The folder, opened component by component from ``/`` without following any symlink."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in path.split("/") if p]:
            if part in (".", ".."):
                raise OSError(f"{path}: relative component")
            child = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = child
        return fd
    except OSError:
        os.close(fd)
        raise


def _unlink_exact(item: Tracked, not_before: float, before: set[tuple[int, int]]) -> bool:
    folder, name = os.path.split(item.path)
    try:
        fd = _open_folder(folder)
    except OSError:
        return False  # a folder swapped for a symlink, or gone
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != (item.dev, item.ino) or stat.S_IFMT(st.st_mode) != item.kind:
            return False
        if st.st_uid != item.uid or st.st_ctime < not_before or (st.st_dev, st.st_ino) in before:
            return False
        if not _writable_by(os.fstat(fd), item.uid):
            return False
        os.unlink(name, dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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
