"""Reading the log files of servers and runs by byte offset, for resumable log streams.

A log lies in a folder its server's user can write, so the root agent opens it without following
a symlink and only as a regular file: a planted link (or a FIFO, which would block the read)
reads as no log, never as somebody else's file."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tunelab.agent.statefile import open_regular

CHUNK_BYTES = 64 * 1024
FOLLOW_POLL = 0.1


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for reading, refused unless it is a regular file reached without a link
    in its last component: FileNotFoundError then, so every caller treats it as no log yet."""
    try:
        fd = open_regular(path)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EINVAL):
            raise
        raise FileNotFoundError(f"{path}: {exc.strerror}, not read") from None
    return os.fdopen(fd, "rb")


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last ``lines`` lines of ``path`` begin."""
    try:
        f = open_log(path)
    except FileNotFoundError:
        return 0
    with f:
        size = os.fstat(f.fileno()).st_size
        if lines <= 0:
            return size
        pos = size
        seen = 0
        block = 8192
        # a trailing newline ends the last line; it does not start another one
        f.seek(max(0, size - 1))
        if size and f.read(1) == b"\n":
            pos -= 1
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step)
            for i in range(len(data) - 1, -1, -1):
                if data[i] == 0x0A:
                    seen += 1
                    if seen == lines:
                        return pos + i + 1
    return 0


def last_lines(path: Path, lines: int, max_bytes: int = 16 * 1024) -> list[str]:
    """The last ``lines`` lines of a log (tqdm's ``\\r`` redraws reduced to their last state)."""
    try:
        with open_log(path) as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - max_bytes))
            text = f.read(max_bytes).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
    return [line for line in out if line.strip()][-lines:]


def read_log_chunks(
    path: Path,
    offset: int,
    *,
    follow: bool,
    finished: Callable[[], bool],
    cancelled: Callable[[], bool],
    wait: Callable[[float], object],
) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(offset, data, eof)`` from ``offset`` on.

    Without ``follow`` it stops at the current end. With it, it waits for more until the owner
    is ``finished`` and every byte was sent; the last chunk then has ``eof`` set.
    """
    pos = max(0, offset)
    while not cancelled():
        done_before_read = finished()
        try:
            with open_log(path) as f:
                size = os.fstat(f.fileno()).st_size
                if pos > size:  # the file was replaced or truncated: start over
                    pos = 0
                f.seek(pos)
                data = f.read(CHUNK_BYTES)
        except FileNotFoundError:
            data = b""
        if data:
            yield pos, data, False
            pos += len(data)
            continue
        if not follow or done_before_read:
            yield pos, b"", done_before_read
            return
        wait(FOLLOW_POLL)
