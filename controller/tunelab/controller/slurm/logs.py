"""``tunelab logs`` for an attempt that ran as a Slurm job: the files in its job folder (on the
file system the controller shares with the nodes). ``server.log`` and ``bench.log`` are copied
there by the job's ``tunelab-agent run-once`` as they grow; ``job`` is Slurm's own output file
(run-once's log). Followed until the attempt is over and every byte was sent."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tunelab.v1 import agent_pb2

CHUNK_BYTES = 64 * 1024
FOLLOW_POLL = 0.5
STREAMS = {"": "server.log", "server": "server.log", "bench": "bench.log", "job": "job.log"}


def tail_offset(path: Path, lines: int) -> int:
    """Where the last ``lines`` lines of ``path`` start (0 when it is shorter)."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size - CHUNK_BYTES)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return 0
    cut = len(data)
    for _ in range(lines + (1 if data.endswith(b"\n") else 0)):
        found = data.rfind(b"\n", 0, cut)
        if found < 0:
            return start
        cut = found
    return start + cut + 1


def job_log_chunks(
    folder: Path,
    stream: str,
    *,
    tail_lines: int,
    follow: bool,
    finished: Callable[[], bool],
    active: Callable[[], bool],
    wait: Callable[[float], object] = time.sleep,
) -> Iterator[agent_pb2.StreamLogsResponse]:
    name = STREAMS.get(stream)
    if name is None:
        raise ValueError(f"stream: expected one of {', '.join(sorted(s for s in STREAMS if s))}")
    path = folder / name
    pos = tail_offset(path, tail_lines) if tail_lines > 0 else 0
    while active():
        done_before_read = finished()
        try:
            with path.open("rb") as f:
                f.seek(pos)
                data = f.read(CHUNK_BYTES)
        except FileNotFoundError:
            data = b""
        if data:
            yield agent_pb2.StreamLogsResponse(offset=pos, data=data)
            pos += len(data)
            continue
        if not follow or done_before_read:
            yield agent_pb2.StreamLogsResponse(offset=pos, eof=done_before_read)
            return
        wait(FOLLOW_POLL)
