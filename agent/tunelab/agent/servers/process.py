"""Processes the agent itself follows (benchmark jobs; servers live under their monitor):
identity (pid + create time), descendants, and a stop ladder for a process the agent started.

A pid alone is never trusted: after a restart or a long stop, the kernel may have handed it to a
stranger. Every signal goes through :func:`identity.signal_exact` (pidfd, then the create time
checked, then the signal); never to a bare group number, never to pid <= 1.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.servers import identity
from tunelab.agent.servers.argv import not_found, with_python

POLL_INTERVAL = 0.05


@dataclass(frozen=True, order=True)
class ProcessId:
    """A process as the kernel cannot reuse: pid plus its create time (psutil's, in seconds)."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        try:
            return cls(pid, psutil.Process(pid).create_time())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def process(self) -> psutil.Process | None:
        """The live process with this identity, or None (gone, zombie, or pid reused)."""
        if self.pid <= 1 or not math.isfinite(self.create_time):
            return None
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 0.05:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return None

    def alive(self) -> bool:
        return self.process() is not None

    def signal(self, sig: int) -> bool:
        """Send ``sig`` if this exact process still lives; True if it was sent."""
        return identity.signal_exact(self.pid, self.create_time, sig)


def spawn(
    argv: list[str], env_additions: Mapping[str, str], cwd: Path, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session and process group, output to ``log_path``.

    stdout/stderr go to the file, never to a pipe the agent would have to drain; stdin is
    /dev/null. An argv element ``{python}`` is this agent's own interpreter, so a spec can run a
    Python module that is installed beside the agent without knowing where (README "Servers").
    Raises InvalidSpec when the program or working directory does not exist.
    """
    argv = with_python(argv)
    env = dict(os.environ)
    env.update(env_additions)
    with log_path.open("ab") as log:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError as exc:
            if not cwd.is_dir():
                raise InvalidSpec("spec.cwd", f"{cwd} is not a directory") from exc
            raise InvalidSpec("spec.argv[0]", not_found(argv[0], str(cwd))) from exc
        except PermissionError as exc:
            raise InvalidSpec("spec.argv[0]", f"{argv[0]!r} is not executable") from exc
        except NotADirectoryError as exc:
            raise InvalidSpec("spec.cwd", f"{cwd} is not a directory") from exc


def descendants(root: ProcessId) -> set[ProcessId]:
    """Every live descendant of ``root`` (not root itself)."""
    proc = root.process()
    if proc is None:
        return set()
    found: set[ProcessId] = set()
    try:
        children = proc.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return found
    for child in children:
        with contextlib.suppress(psutil.Error):
            found.add(ProcessId(child.pid, child.create_time()))
    return found


def process_group_members(pgid: int) -> set[ProcessId]:
    """Live members of a process group (each still verified again before any signal)."""
    found: set[ProcessId] = set()
    if pgid <= 1:
        return found
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                found.add(ProcessId(proc.pid, proc.info["create_time"]))
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


@dataclass(frozen=True)
class StopOutcome:
    """What the ladder did: how it ended and which processes survived."""

    escalated: bool  # SIGKILL was needed
    survivors: tuple[ProcessId, ...]  # still alive after SIGKILL and the kill timeout


def stop_process_tree(
    leader: ProcessId,
    known: Iterable[ProcessId],
    grace: float,
    *,
    kill_timeout: float = 10.0,
    reap: Callable[[], object] = lambda: None,
    should_abort: Callable[[], bool] = lambda: False,
) -> StopOutcome:
    """SIGTERM ``leader``'s tree and group, wait ``grace``, SIGKILL what is left (also every
    ``known`` process that left them), then wait up to ``kill_timeout`` for all to be gone.

    Each process is verified (pid + create time) as it is signalled. ``reap`` lets the owner of
    a Popen collect the exit status so the leader does not linger as a zombie.
    """
    tracked = {leader, *known}

    def alive() -> list[ProcessId]:
        reap()
        found = tracked | descendants(leader)
        if leader.alive():  # the group id is the leader's only while the leader lives
            found |= process_group_members(leader.pid)
        tracked.update(found)
        return sorted(p for p in found if p.alive())

    for proc in alive():
        proc.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline and not should_abort():
        time.sleep(POLL_INTERVAL)
    remaining = alive()
    if not remaining:
        return StopOutcome(False, ())
    deadline = time.monotonic() + kill_timeout
    while time.monotonic() < deadline:
        for proc in remaining:  # again each round: a process may have forked meanwhile
            proc.signal(signal.SIGKILL)
        time.sleep(POLL_INTERVAL)
        remaining = alive()
        if not remaining:
            return StopOutcome(True, ())
    return StopOutcome(True, tuple(alive()))


def port_in_use(port: int) -> bool:
    """True when something listens on ``port`` (any IPv4 address) or accepts on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    try:
        sock6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:  # no IPv6 on this host: the IPv4 answer stands
        return False
    with sock6:
        sock6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock6.bind(("::", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
