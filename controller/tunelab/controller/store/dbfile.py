"""The SQLite file itself: created 0600 together with its ``-wal`` and ``-shm`` whatever the
umask; watched, so a database deleted or replaced under a running controller stops writes
instead of silently losing them; and SQLite's errors for a read-only, full or vanished disk
turned into StoreErrors that say what to do."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import structlog

from tunelab.controller.store.base import StoreError, StoreFull, StoreUnavailable

log = structlog.get_logger(__name__)
MODE = 0o600
SIDE_FILES = ("-wal", "-shm")
_READONLY, _IOERR, _FULL, _CANTOPEN = 8, 10, 13, 14  # SQLite primary result codes


def create_private(path: Path) -> None:
    """Create (or tighten) the database and its side files as 0600 before SQLite opens them:
    SQLite gives ``-wal``/``-shm`` the mode it is given, and the umask decides the rest."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = Path(exc.filename) if exc.filename else path.parent
        raise StoreUnavailable(
            f"cannot create the database's folder {where}: {exc.strerror} "
            "(give --db a file in a folder the controller can create or write)"
        ) from None
    for name in ("", *SIDE_FILES):
        target = Path(f"{path}{name}")
        try:
            fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, MODE)
        except OSError as exc:
            raise StoreUnavailable(_open_problem(target, exc)) from None
        try:
            if os.fstat(fd).st_mode & 0o777 != MODE:
                os.fchmod(fd, MODE)
        finally:
            os.close(fd)


def _open_problem(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (
            f"cannot write the database {path}: {exc.strerror} (the controller needs it writable)"
        )
    return f"cannot open the database {path}: {exc.strerror}"


class FileIdentity:
    """The (device, inode) the store opened; ``check`` raises once the path no longer names
    that file (deleted, or replaced by a restore or another program)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        st = path.stat()
        self._identity = (st.st_dev, st.st_ino)
        self._reported = False

    def check(self) -> None:
        try:
            st = self.path.stat()
            problem = "" if (st.st_dev, st.st_ino) == self._identity else "was replaced"
        except FileNotFoundError:
            problem = "was deleted"
        if problem:
            message = (
                f"the database {self.path} {problem} while the controller ran; writes are "
                "refused so that nothing is lost: restore the file and restart the controller"
            )
            if not self._reported:
                log.error("store_file_gone", path=str(self.path), problem=problem)
                self._reported = True
            raise StoreUnavailable(message)


def translate(exc: sqlite3.Error, path: Path) -> StoreError | None:
    """A StoreError for the SQLite errors a person must act on; None for the others."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == _FULL:
        return StoreFull(
            f"the disk holding {path} is full; nothing of this request was stored "
            "(free space, then retry)"
        )
    if code == _READONLY:
        return StoreUnavailable(f"the database {path} is read-only: {exc}")
    if code in (_IOERR, _CANTOPEN):
        return StoreUnavailable(f"cannot use the database {path}: {exc}")
    return None
