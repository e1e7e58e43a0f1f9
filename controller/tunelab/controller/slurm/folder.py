"""A Slurm jobs folder is trusted only when it is ours (issue 36.1).

The controller keeps Slurm jobs' files in ``slurm_dir`` (default ``<db>.slurm``) on a file system
it shares with the nodes: the key that signs every attempt's report token, and per attempt its
run spec, token and ``job.sh``. Someone who can write that folder can plant a key the controller
would sign with (and so forge a ``ReportRun``), or rename an attempt's folder away and put their
own ``job.sh`` under its name. So, as the agent does with its state dir:

- the folder is opened with ``O_NOFOLLOW|O_DIRECTORY`` and checked through that handle: a real
  directory, owned by the controller's uid, not writable by group or others;
- the key is created ``O_EXCL|O_NOFOLLOW`` 0600; an existing one is read only when it is a plain
  file of the controller's uid, mode 0600 or stricter, one link, 32 bytes;
- an attempt's folder is made and written relative to the jobs folder's handle, and itself
  opened ``O_NOFOLLOW`` and checked the same way before anything is written in it.

A refusal is :class:`UntrustedJobsFolder`, one line naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

KEY_FILE = "report.key"
KEY_BYTES = 32
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UntrustedJobsFolder(RuntimeError):
    """The Slurm jobs folder (or a file in it) is not the controller's alone; says the fix."""


def _fix(path: Path, uid: int) -> str:
    return (
        f"make it the controller's alone (chown {uid} {path} && chmod 0700 {path}), "
        "or set slurm_dir to a folder only the controller's user can write"
    )


def dir_problem(info: os.stat_result, uid: int) -> str | None:
    """What makes a folder untrusted for ``uid``, or None."""
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != uid:
        return f"is owned by uid {info.st_uid}, not {uid} (the controller's)"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _refuse(path: Path, found: str, uid: int) -> UntrustedJobsFolder:
    return UntrustedJobsFolder(f"Slurm jobs folder {path} {found}; refused: {_fix(path, uid)}")


def _open_dir(path: Path, uid: int, dir_fd: int | None = None) -> int:
    name = path.name if dir_fd is not None else str(path)
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if path.is_symlink():
            raise _refuse(path, "is a symlink", uid) from None
        if isinstance(exc, NotADirectoryError):
            raise _refuse(path, "is not a directory", uid) from None
        raise
    found = dir_problem(os.fstat(fd), uid)
    if found is not None:
        os.close(fd)
        raise _refuse(path, found, uid)
    return fd


def check(path: Path, uid: int | None = None) -> None:
    """Refuse an existing jobs folder (and key) that is not ``uid``'s alone; a missing one is
    fine (made at first use). The controller runs this at start."""
    owner = os.geteuid() if uid is None else uid
    if not os.path.lexists(path):
        return
    with open_folder(path, owner, create=False) as fd:
        if _key_exists(fd):
            read_key(path, fd, owner)


@contextlib.contextmanager
def open_folder(path: Path, uid: int | None = None, *, create: bool = True) -> Iterator[int]:
    """The jobs folder's handle, made 0700 when missing, after the trust checks."""
    owner = os.geteuid() if uid is None else uid
    if create and not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    fd = _open_dir(path, owner)
    try:
        yield fd
    finally:
        os.close(fd)


def _key_exists(dir_fd: int) -> bool:
    try:
        os.stat(KEY_FILE, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def read_key(folder: Path, dir_fd: int, uid: int) -> bytes:
    """The existing key, when it is a plain 0600 file of ``uid`` with one link and 32 bytes."""
    path = folder / KEY_FILE
    try:
        fd = os.open(KEY_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        raise UntrustedJobsFolder(
            f"Slurm report key {path} cannot be opened without following links ({exc.strerror}); "
            f"refused: remove it (a new one is made) and {_fix(folder, uid)}"
        ) from None
    try:
        info = os.fstat(fd)
        found = None
        if not stat.S_ISREG(info.st_mode):
            found = "is not a plain file"
        elif info.st_uid != uid:
            found = f"is owned by uid {info.st_uid}, not {uid} (the controller's)"
        elif info.st_mode & 0o077:
            found = f"is readable or writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
        elif info.st_nlink != 1:
            found = f"has {info.st_nlink} links"
        elif info.st_size != KEY_BYTES:
            found = f"is {info.st_size} bytes, not {KEY_BYTES}"
        if found is not None:
            raise UntrustedJobsFolder(
                f"Slurm report key {path} {found}; refused: remove it (the controller makes a "
                f"new one, 0600) and {_fix(folder, uid)}"
            )
        return os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)


def load_key(folder: Path, uid: int | None = None) -> bytes:
    """The key that signs report tokens: made ``O_EXCL|O_NOFOLLOW`` 0600 in a trusted folder, or
    the existing one after its checks."""
    owner = os.geteuid() if uid is None else uid
    with open_folder(folder, owner) as dir_fd:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(KEY_FILE, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            return read_key(folder, dir_fd, owner)
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        return key


@contextlib.contextmanager
def attempt_folder(folder: Path, attempt_id: str, uid: int | None = None) -> Iterator[int]:
    """An attempt's folder (made 0700 relative to the jobs folder's handle), opened
    ``O_NOFOLLOW`` and checked: files are written relative to the handle yielded."""
    owner = os.geteuid() if uid is None else uid
    if "/" in attempt_id or attempt_id in ("", ".", ".."):
        raise UntrustedJobsFolder(f"attempt id {attempt_id[:64]!r} is not a folder name")
    with open_folder(folder, owner) as dir_fd:
        with contextlib.suppress(FileExistsError):
            os.mkdir(attempt_id, 0o700, dir_fd=dir_fd)
        fd = _open_dir(folder / attempt_id, owner, dir_fd=dir_fd)
        try:
            yield fd
        finally:
            os.close(fd)


def write_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write ``name`` in the folder ``dir_fd`` (no link followed; an existing file replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    os.fchmod(fd, mode)  # whatever the umask
    with os.fdopen(fd, "wb") as out:
        out.write(data)
