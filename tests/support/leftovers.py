"""Kill what a test's agent left running under its state dir (a server outlives its agent by
design, so a test that only stops the agent leaves its monitor and server behind)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil


def kill_processes_under(root: Path) -> list[int]:
    """SIGKILL every process whose working directory lies under ``root``; the pids killed.
    psutil checks each process's identity (pid + start time) before it signals it."""
    root = root.resolve()
    killed = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError, ValueError):
            cwd = Path(proc.cwd().removesuffix(" (deleted)"))
            if proc.pid > 1 and cwd.is_relative_to(root):
                proc.kill()
                killed.append(proc.pid)
    return killed


def outliving(root: Path, since: float) -> list[psutil.Process]:
    """Processes started since ``since`` that work under ``root`` or name it on their command
    line (a daemon's --db, --state-dir): what a test started and never stopped."""
    root = root.resolve()
    found = []
    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError, ValueError):
            # psutil's start times rest on the boot time in whole seconds: allow for it
            if proc.pid <= 1 or proc.pid in mine or proc.create_time() < since - 2:
                continue
            cwd = Path(proc.cwd().removesuffix(" (deleted)"))
            if cwd.is_relative_to(root) or any(str(root) in arg for arg in proc.cmdline()):
                found.append(proc)
    return found
