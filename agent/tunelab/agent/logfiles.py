"""Reading the log files of servers and runs by byte offset, for resumable log streams."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

CHUNK_BYTES = 64 * 1024
FOLLOW_POLL = 0.1


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last ``lines`` lines of ``path`` begin."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if lines <= 0:
        return size
    with path.open("rb") as f:
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
        size = path.stat().st_size
        with path.open("rb") as f:
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", errors="replace")
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
            with path.open("rb") as f:
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
