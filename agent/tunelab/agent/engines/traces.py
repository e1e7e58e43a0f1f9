"""The profiler traces a run keeps: compressed, bounded, confined to the run's ``traces`` folder.

The engine writes into ``runs/<run_id>/traces/`` (the folder the agent named in its flags);
after the benchmark the agent keeps what is there:

- only regular files directly in that folder, reached without following a symlink (the folder
  is opened ``O_DIRECTORY | O_NOFOLLOW`` and every file relative to it, ``O_NOFOLLOW``); links,
  folders and odd names are skipped with a warning;
- a file not yet gzipped is gzipped (Perfetto and ``tunelab profile`` read both) and the
  original removed;
- ``*.json[.gz]`` files are ``traces``; anything else (vLLM writes ``*.profiler_out.txt``, its
  own key_averages table, beside each trace) is listed under ``other_files``;
- files are kept in name order while their total stays within the cap; a file over it is
  deleted (relative to the folder) and named in a warning, never half kept.

The listing is returned for the run's result (``result["profile"]``): that list is the only
thing ``FetchProfile`` will open, by name, relative to the same folder. A server started with
``--profile`` keeps its traces the same way in ``servers/<id>/traces/``, one listing per profile
(``tunelab.agent.servers.profiler``).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRACE_DIR = "traces"
TRACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$")
CHUNK = 1 << 20
# a file is gzipped only when its raw size is within this many times the cap left (traces
# compress 10-30x): an 8 GiB sparse file is deleted at once, not compressed for minutes first
RAW_FACTOR = 4


class TraceNotFound(Exception):
    """No kept trace of that name."""


class TraceOverCap(Exception):
    """A trace grew past the cap while it was being compressed."""


def _plain_file(fd: int, name: str) -> os.stat_result:
    """The open file's own status, refused (OSError) unless a regular file with one link: a
    name swapped for a FIFO, a device or a hard link to someone else's file is never read."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, f"{name} is not a regular file")
    if info.st_nlink != 1:
        raise OSError(errno.EMLINK, f"{name} has {info.st_nlink} links")
    return info


def _open_dir(folder: Path) -> int:
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _open_file(dir_fd: int, name: str, flags: int = os.O_RDONLY) -> int:
    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)


def _gzip(dir_fd: int, name: str, raw_limit: int, out_limit: int) -> str:
    """``name`` gzipped beside itself (then removed); returns the new name. TraceOverCap (the
    partial file removed) when more than ``raw_limit`` bytes are read or ``out_limit`` written."""
    target = name + ".gz"
    partial = f".{target}.partial"
    source = _open_file(dir_fd, name, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _plain_file(source, name)
        out_fd = _open_file(dir_fd, partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        read = 0
        with os.fdopen(source, "rb", closefd=False) as src, os.fdopen(out_fd, "wb") as raw:
            with gzip.GzipFile(filename=name, mode="wb", fileobj=raw, compresslevel=6) as out:
                while block := src.read(CHUNK):
                    read += len(block)
                    if read > raw_limit:
                        raise TraceOverCap(f"{name} grew past the cap while compressed")
                    out.write(block)
                    if raw.tell() > out_limit:
                        raise TraceOverCap(f"{name} compressed past the cap")
            raw.flush()
            os.fsync(raw.fileno())
    except TraceOverCap:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=dir_fd)
        raise
    finally:
        os.close(source)
    os.rename(partial, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.unlink(name, dir_fd=dir_fd)
    return target


def keep_traces(
    run_dir: Path, max_bytes: int, skip: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Compress, bound and list the traces in ``run_dir/traces``; never raises for their content.
    ``skip``: names already there before this profile (a server's earlier ones), left as they are
    and not counted against the cap."""
    folder = run_dir / TRACE_DIR
    warnings: list[str] = []
    kept: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    try:
        dir_fd = _open_dir(folder)
    except FileNotFoundError:
        return _nothing("profile: no trace was written")
    except OSError as exc:
        return _nothing(f"profile: {folder}: {exc}")
    total = 0
    try:
        for name in sorted(os.listdir(dir_fd)):  # noqa: PTH208 (a listing by folder fd)
            if name.startswith(".") and name.endswith(".partial"):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
                continue
            if name in skip:
                continue
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or not TRACE_NAME.match(name):
                warnings.append(f"profile: {name!r} in the trace folder is not a trace: skipped")
                continue
            if info.st_nlink != 1:  # a hard link to a file the engine did not write
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)  # the link only; the file it names stays
                warnings.append(
                    f"profile: {name} has {info.st_nlink} links (a hard link, not a trace the "
                    "engine wrote): removed, not kept"
                )
                continue
            raw_limit = max(0, max_bytes - total) * RAW_FACTOR
            if not name.endswith(".gz") and info.st_size > raw_limit:
                os.unlink(name, dir_fd=dir_fd)
                warnings.append(
                    f"profile: {name} ({info.st_size} bytes before compression) is over "
                    f"{RAW_FACTOR}x the cap left ({max_bytes - total} of {max_bytes} bytes): "
                    "deleted without compressing"
                )
                continue
            try:
                if not name.endswith(".gz"):
                    name = _gzip(dir_fd, name, raw_limit, max_bytes - total)
                size = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
            except TraceOverCap as exc:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
                warnings.append(f"profile: {exc} ({max_bytes} bytes): deleted")
                continue
            except OSError as exc:
                warnings.append(f"profile: cannot keep {name}: {exc.strerror or exc}")
                continue
            if total + size > max_bytes:
                os.unlink(name, dir_fd=dir_fd)
                warnings.append(
                    f"profile: {name} ({size} bytes) is over the cap of {max_bytes} bytes "
                    f"({total} kept before it): deleted"
                )
                continue
            total += size
            is_trace = name.endswith((".json.gz", ".json"))
            (kept if is_trace else others).append({"name": name, "size_bytes": size})
    finally:
        os.close(dir_fd)
    if not kept and not any("over the cap" in w for w in warnings):
        warnings.append("profile: no trace was written")
    return {"traces": kept, "other_files": others, "total_bytes": total, "warnings": warnings}


def _nothing(warning: str) -> dict[str, Any]:
    return {"traces": [], "other_files": [], "total_bytes": 0, "warnings": [warning]}


def listed(result: dict[str, Any] | None) -> set[str]:
    """The trace names a run's result lists."""
    return listed_in((result or {}).get("profile"))


def listed_in(profile: object) -> set[str]:
    """The trace names one listing (``keep_traces``' answer) names."""
    if not isinstance(profile, dict):
        return set()
    files = [*profile.get("traces", []), *profile.get("other_files", [])]
    return {
        str(t.get("name"))
        for t in files
        if isinstance(t, dict) and TRACE_NAME.match(str(t.get("name", "")))
    }


def read_trace(
    run_dir: Path, name: str, allowed: set[str], offset: int, max_bytes: int
) -> Iterator[tuple[int, bytes, int, bool]]:
    """(offset, data, file size, last) chunks of a kept trace, by a name the run lists."""
    if name not in allowed or not TRACE_NAME.match(name):
        raise TraceNotFound(f"the run keeps no trace named {name!r}")
    try:
        dir_fd = _open_dir(run_dir / TRACE_DIR)
    except OSError as exc:
        raise TraceNotFound(f"the run's trace folder is gone: {exc.strerror or exc}") from exc
    try:
        fd = _open_file(dir_fd, name, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise TraceNotFound(f"{name}: {exc.strerror or exc}") from exc
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as src:
        try:  # what was opened, not what was listed: a swapped name is refused here
            size = _plain_file(src.fileno(), name).st_size
        except OSError as exc:
            raise TraceNotFound(f"{exc.strerror}: not served") from None
        end = size if max_bytes <= 0 else min(size, offset + max_bytes)
        position = min(max(offset, 0), size)
        src.seek(position)
        if position >= end:
            yield position, b"", size, True
            return
        while position < end:
            data = src.read(min(CHUNK, end - position))
            if not data:
                break
            yield position, data, size, position + len(data) >= size
            position += len(data)
