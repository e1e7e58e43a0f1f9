"""Reading a file somebody else may have planted or shaped (issue 45.3): a checkpoint's headers
and index from a hub, a ``tokenizer.json``, the simulator's ``--speed-file`` in a shared folder.
The root agent reads these, so each is opened as hostile input:

- ``O_NONBLOCK``: a FIFO in the file's place cannot hang the open (it is then refused);
- ``O_NOFOLLOW``: a link is refused, or, with ``links_within``, followed only when its target
  resolves inside that folder (a Hugging Face cache snapshot links every file into its blobs);
- ``fstat`` before any read: a regular file only, at most ``max_bytes`` (no FIFO, device,
  socket or folder), owned by one of ``owners`` where the file steers what we do;
- reads stop at ``max_bytes`` and at ``seconds`` (a slow network mount), whatever ``st_size``
  said when the file was opened.

Refusals are :class:`UntrustedFile` (an ``OSError``, so the callers' ``except OSError`` that
already handles an unreadable file handles these), whose message names the file and the bound.
Stdlib only: the per-server monitor and the simulator import it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Collection
from pathlib import Path

CHUNK = 1 << 20
DEFAULT_SECONDS = 30.0
HUB_SNAPSHOTS = "snapshots"  # <cache>/models--org--name/snapshots/<revision>/<file>


class UntrustedFile(OSError):
    """The file was refused: not a regular file, a link out, a stranger's, or too large/slow."""

    def __init__(self, path: str | Path, why: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, why, str(path))
        self.why = why

    def __str__(self) -> str:
        return f"{self.filename}: {self.why}"


def trusted_owners() -> frozenset[int]:
    """Root and this process's user: who may own a file that steers what this process does."""
    return frozenset({0, os.geteuid()})


def link_root(folder: str | Path) -> Path:
    """Where a folder's files may link to: the folder itself, or, for a Hugging Face cache
    snapshot (``…/models--o--n/snapshots/REV``), the repository folder holding its blobs."""
    real = Path(os.path.realpath(folder))
    if real.parent.name == HUB_SNAPSHOTS and real.parent.parent.name.startswith("models--"):
        return real.parent.parent
    return real


def _target(path: Path, links_within: Path | None) -> Path:
    """``path`` itself, or, with ``links_within``, where it resolves (which must be inside)."""
    if links_within is None:
        return path
    real = Path(os.path.realpath(path))
    root = Path(os.path.realpath(links_within))
    if real != root and root not in real.parents:
        raise UntrustedFile(path, f"resolves to {real}, outside {root}")
    return real


def open_fd(
    path: str | Path,
    *,
    max_bytes: int | None = None,
    owners: Collection[int] | None = None,
    links_within: str | Path | None = None,
) -> int:
    """A read-only descriptor of ``path`` once it passed the checks (the caller closes it)."""
    target = _target(Path(path), Path(links_within) if links_within is not None else None)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(target, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFile(path, "a symbolic link (not followed)", errno.ELOOP) from None
        if exc.errno == errno.ENXIO:  # a socket, or a device without its driver
            raise UntrustedFile(path, "not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFile(path, f"not a regular file ({_kind(info.st_mode)})")
        if owners is not None and info.st_uid not in owners:
            who = ", ".join(str(uid) for uid in sorted(owners))
            raise UntrustedFile(path, f"owned by uid {info.st_uid}, not by uid {who}")
        if max_bytes is not None and info.st_size > max_bytes:
            raise UntrustedFile(path, f"{info.st_size} bytes, more than the {max_bytes} read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_untrusted(
    path: str | Path,
    max_bytes: int,
    *,
    owners: Collection[int] | None = None,
    links_within: str | Path | None = None,
    seconds: float = DEFAULT_SECONDS,
    offset: int = 0,
    whole: bool = True,
) -> bytes:
    """The bytes of ``path`` from ``offset``, at most ``max_bytes``: with ``whole``, a file
    with more is refused (UntrustedFile), without it only that many are read (a header at the
    start of a large file). Reads that outlast ``seconds`` are refused too."""
    fd = open_fd(path, owners=owners, links_within=links_within)
    deadline = time.monotonic() + seconds
    try:
        size = os.fstat(fd).st_size
        if whole and size - offset > max_bytes:
            raise UntrustedFile(path, f"{size - offset} bytes, more than the {max_bytes} read")
        limit = max_bytes + 1 if whole else max_bytes  # one more: a file that grew is seen
        parts: list[bytes] = []
        got = 0
        while got < limit:
            chunk = os.pread(fd, min(CHUNK, limit - got), offset + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
            if time.monotonic() > deadline:
                raise UntrustedFile(path, f"still reading after {seconds:g} s")
        if got > max_bytes:
            raise UntrustedFile(path, f"grew past the {max_bytes} bytes read")
        return b"".join(parts)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a plain file"
