"""Process identity read from procfs, and the one function that sends a signal.

Stdlib only: the per-server monitor imports this and must stay small. A process is its pid plus
its start time (``create_time``, seconds since the epoch, computed as psutil does so both agree);
a pid alone is never trusted, because the kernel hands a freed pid to the next process.

:func:`signal_exact` opens a pidfd first, then checks the start time, then signals through the
pidfd: once the pidfd is open it names that one process, so a check that passes after the open
cannot be raced by a reuse of the number.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
WALK_TRIES = 5  # walks of a tree that keeps changing under the reader before taking the last
CREATE_TIME_TOLERANCE = 0.05  # clock ticks are 10 ms; psutil rounds the same way
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_boot_time: float | None = None


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str  # one letter, "Z" for a zombie
    ppid: int
    create_time: float


def boot_time() -> float:
    global _boot_time
    if _boot_time is None:
        for line in (PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                _boot_time = float(line.split()[1])
                break
        else:
            _boot_time = 0.0
    return _boot_time


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat``, or None when there is no such process."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    rest = raw[raw.rfind(b")") + 2 :].split()
    try:
        ticks = int(rest[19])
        return ProcStat(pid, rest[0].decode(), int(rest[1]), boot_time() + ticks / _CLK_TCK)
    except (IndexError, ValueError):
        return None


def all_processes() -> list[ProcStat]:
    found = []
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None:
                found.append(stat)
    return found


def _children(pid: int) -> list[int] | None:
    """Children of every thread of ``pid`` (``/proc/<pid>/task/*/children``); None when the
    kernel has no such file (CONFIG_PROC_CHILDREN off)."""
    try:
        tasks = list(os.scandir(PROC / str(pid) / "task"))
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            found += [int(c) for c in (Path(task.path) / "children").read_text().split()]
        except FileNotFoundError:
            if not (Path(task.path) / "stat").exists():
                continue  # the thread just ended
            return None
        except (OSError, ValueError):
            continue
    return found


def descendants(root: int) -> dict[int, float]:
    """Every live (non-zombie) descendant of ``root``: pid → create time.

    Walks the children files from ``root`` (cost: the size of the tree, not of the host);
    falls back to one pass over all of /proc where the kernel lacks them. A process that exits
    while the walk reads it hands its children to the subreaper above it, after the walk has
    passed there. So does a multi-threaded process whose main thread has already exited (it
    reads as a zombie while its other threads still hold children). A walk that met either is
    done again, after a pause that doubles from 1 ms, so a stop never takes a tree for gone
    while a worker that ignores SIGTERM is in transit under it.
    """
    found: dict[int, float] = {}
    for attempt in range(WALK_TRIES):
        found, settled = _walk(root)
        if settled:
            break
        time.sleep(0.001 * 2**attempt)
    return found


def _walk(root: int) -> tuple[dict[int, float], bool]:
    """The tree as read, and whether no process in it was exiting during the read."""
    found: dict[int, float] = {}
    seen: set[int] = {root}
    todo = [root]
    settled = True
    while todo:
        pid = todo.pop()
        children = _children(pid)
        if children is None:
            return _descendants_by_scan(root), True
        if pid in found:  # alive when listed: did it exit before its children were read?
            after = read_stat(pid)
            if after is None or after.state == "Z":
                settled = False  # then its children moved up, past where the walk has been
        for child in children:
            stat = read_stat(child)
            if stat is None or child in seen:
                continue
            seen.add(child)
            if stat.state != "Z":
                found[child] = stat.create_time
                todo.append(child)
            elif not _bare_zombie(child):
                settled = False  # its main thread is gone, others still hand on children
                todo.append(child)
    return found, settled


def _bare_zombie(pid: int) -> bool:
    """A zombie none of whose threads live on: it holds no children and can get none."""
    try:
        return [t.name for t in os.scandir(PROC / str(pid) / "task")] in ([], [str(pid)])
    except OSError:
        return True


def _descendants_by_scan(root: int) -> dict[int, float]:
    children: dict[int, list[ProcStat]] = {}
    for stat in all_processes():
        children.setdefault(stat.ppid, []).append(stat)
    found: dict[int, float] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid in found or child.pid == root:
                continue
            if child.state != "Z":
                found[child.pid] = child.create_time
            todo.append(child.pid)
    return found


def matches(pid: int, create_time: float) -> bool:
    """True when ``pid`` is alive, not a zombie, and started at ``create_time``."""
    if pid <= 1 or not math.isfinite(create_time):
        return False
    stat = read_stat(pid)
    return (
        stat is not None
        and stat.state != "Z"
        and abs(stat.create_time - create_time) <= CREATE_TIME_TOLERANCE
    )


def signal_exact(pid: int, create_time: float, sig: int) -> bool:
    """Send ``sig`` to exactly this process; False (nothing sent) unless it is verified.

    Refused outright: pid <= 1, a non-finite create time, the caller itself and any member of
    the caller's own process group.
    """
    if pid <= 1 or pid == os.getpid() or not math.isfinite(create_time):
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # ESRCH: gone; anything else: not ours to guess about
        return False
    try:
        if not matches(pid, create_time) or os.getpgid(pid) == os.getpgrp():
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:  # exited between the check and the signal: the pidfd saw to it
        return False
    finally:
        os.close(fd)
