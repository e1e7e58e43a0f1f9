"""Atomic JSON state files: written to a temporary name, fsynced, renamed over the old one, so a
crash at any instant leaves either the old or the new document, never half of one. Every file is
opened without following a symlink (``O_NOFOLLOW``): a planted link is an error, never a path to
somebody else's file (the rename replaces a link itself, not its target). Stdlib only: the
per-server monitor uses it too."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from tunelab.common.untrusted import open_fd


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symlink in the last component (ELOOP instead)."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def open_regular(path: Path) -> int:
    """``path`` opened for reading only if it is a regular file reached without following a link
    (OSError otherwise: ELOOP for a link, EINVAL for a FIFO, socket or device). Non-blocking, so
    a FIFO planted in its place cannot hang the agent in ``open``."""
    return open_fd(path)  # tunelab.common.untrusted: the one opener of files not ours


def read_json(path: Path, max_bytes: int | None = None) -> Any:
    """The JSON document at ``path``; with ``max_bytes``, a larger file is a ValueError naming
    the limit (a result file is written by the user's benchmark: its size is not ours)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        if max_bytes is None:
            return json.loads(handle.read())
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return json.loads(data)


def quarantine(path: Path, reason: str) -> Path:
    """Keep an unreadable state file under a new name beside it (never delete it: it is the
    evidence), so the next start does not trip over it again. Returns the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = path.with_name(f"{path.name}.quarantined-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.quarantined-{stamp}-{n}")
    path.replace(target)
    with contextlib.suppress(OSError):  # a full disk must not stop the rename that matters
        why = open_nofollow(
            target.parent / f"{target.name}.why", os.O_WRONLY | os.O_CREAT | os.O_EXCL
        )
        with os.fdopen(why, "w") as out:
            out.write(reason + "\n")
    return target


class StateDirBusy(RuntimeError):
    """Another agent holds this state dir."""


class StateDirLock:
    """One agent per state dir: an exclusive ``flock`` on ``agent.lock``, taken before anything
    in the dir is read or changed, held for the life of the process (the kernel drops it when
    the process dies, even by kill -9). The holder's pid is written into the file for the message
    a second agent prints."""

    NAME = "agent.lock"

    def __init__(self, state_dir: Path) -> None:
        from tunelab.agent.statedir import trust_state_dir  # stdlib only, like this module

        trust_state_dir(state_dir)
        self.path = state_dir / self.NAME
        try:
            self._fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:  # a symlink (ELOOP), a directory (EISDIR), ...
            raise StateDirBusy(
                f"cannot take the lock {self.path}: {exc.strerror} (it must be a plain file of "
                "this agent's); not starting, nothing changed"
            ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise StateDirBusy(
                f"state dir {state_dir} is held by another agent (pid {holder}, lock {self.path}); "
                "not starting, nothing changed"
            ) from None
        with contextlib.suppress(OSError):  # a full disk must not stop the agent: the lock holds
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
