"""A state dir is trusted only when it is ours (issue 23.2).

The agent runs as root on most hosts and acts on what its state dir holds: it takes a lock there,
signals the processes its state files name, talks to the sockets it finds, deletes leftovers.
A dir someone else can write lets them plant symlinks and forged files there, so before anything
in it is opened the agent checks the dir itself and its ``servers/`` and ``runs/`` folders: each
must be a real directory (not a symlink), owned by the agent's uid, and not writable by group or
others. A refusal is one line naming the path and the fix. Stdlib only: the monitor imports the
state-file helpers beside it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SUBDIRS = ("servers", "runs")


class UntrustedStateDir(RuntimeError):
    """The state dir (or a folder in it) is not the agent's alone; the message says the fix."""


def problem(path: Path, uid: int) -> str | None:
    """What makes ``path`` untrusted for ``uid``, or None when it is a dir only ``uid`` writes."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != uid:
        return f"is owned by uid {info.st_uid}, not {uid} (this agent's)"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def trust_state_dir(state_dir: Path, uid: int | None = None) -> None:
    """Create what is missing (0700), then refuse a state dir that is not ``uid``'s alone."""
    owner = os.geteuid() if uid is None else uid
    for path in (state_dir, *(state_dir / name for name in SUBDIRS)):
        found = problem(path, owner)
        if found is None and not os.path.lexists(path):
            path.mkdir(mode=0o700, parents=path == state_dir)
        if found is not None:
            raise UntrustedStateDir(
                f"state dir {path} {found}; not starting: make it the agent's alone "
                f"(chown {owner} {path} && chmod 0700 {path}) or choose another --state-dir"
            )
