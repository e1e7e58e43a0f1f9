"""Did the kernel's OOM killer end one of a server's processes? The kernel log says so by pid:
``Out of memory: Killed process 4242 (python3) total-vm:...`` and ``oom-kill:...,pid=4242,...``.

Read once, when a server has exited on its own, non-blocking and bounded; records older than the
server's start are skipped (their timestamp is microseconds of CLOCK_MONOTONIC).
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

KMSG = Path("/dev/kmsg")
MAX_RECORDS = 20000
_KILLED = re.compile(r"Killed process (\d+)|oom-kill:.*?[,:]pid=(\d+)")


def oom_killed(pids: Iterable[int], since_monotonic: float, kmsg: Path = KMSG) -> tuple[int, ...]:
    """Which of ``pids`` the OOM killer killed after ``since_monotonic``; () if unreadable."""
    wanted = {p for p in pids if p > 1}
    if not wanted:
        return ()
    since_us = int(since_monotonic * 1e6)
    found: set[int] = set()
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ()
    try:
        for _ in range(MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while reading: go on
                    continue
                break  # EAGAIN: the end
            if not record:
                break
            at, pids = parse_record(record)
            if at >= since_us:
                found |= pids & wanted
    finally:
        os.close(fd)
    return tuple(sorted(found))


def parse_record(record: bytes) -> tuple[int, set[int]]:
    """One /dev/kmsg record (``PRIORITY,SEQ,USEC,FLAGS;TEXT``): its time in microseconds of
    CLOCK_MONOTONIC and the pids it says the OOM killer killed (-1 and none if malformed)."""
    header, _, text = record.decode("utf-8", "replace").partition(";")
    fields = header.split(",")
    if len(fields) < 3 or not fields[2].isdigit():
        return -1, set()
    return int(fields[2]), {int(m[1] or m[2]) for m in _KILLED.finditer(text)}


def monotonic_of(unix_time: float) -> float:
    """A wall-clock time on the monotonic clock (for ``since_monotonic``)."""
    return time.monotonic() - (time.time() - unix_time)
