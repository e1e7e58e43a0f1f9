"""Processes the agent launches: spawn, identity (pid + create time), descendants, the stop ladder.

A pid alone is never trusted: after a restart or a long stop, the kernel may have handed it to a
stranger. Every signal goes to a :class:`ProcessId` whose create time still matches.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from tunelab.agent.errors import InvalidSpec

POLL_INTERVAL = 0.05
PYTHON_PLACEHOLDER = "{python}"  # in a spec's argv: the interpreter the agent runs on


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
        proc = self.process()
        if proc is None:
            return False
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        return True


def spawn(
    argv: list[str], env_additions: Mapping[str, str], cwd: Path, log_path: Path
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session and process group, output to ``log_path``.

    stdout/stderr go to the file, never to a pipe the agent would have to drain; stdin is
    /dev/null. An argv element ``{python}`` is this agent's own interpreter, so a spec can run a
    Python module that is installed beside the agent without knowing where (README "Servers").
    Raises InvalidSpec when the program or working directory does not exist.
    """
    argv = [sys.executable if part == PYTHON_PLACEHOLDER else part for part in argv]
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
            raise InvalidSpec("spec.argv[0]", _not_found(argv[0], cwd)) from exc
        except PermissionError as exc:
            raise InvalidSpec("spec.argv[0]", f"{argv[0]!r} is not executable") from exc
        except NotADirectoryError as exc:
            raise InvalidSpec("spec.cwd", f"{cwd} is not a directory") from exc


def _not_found(program: str, cwd: Path) -> str:
    """Why the program was not found, with where it was looked for."""
    if "/" not in program:
        return f"{program!r} not found on the agent's PATH (give an absolute path, or {{python}})"
    if not program.startswith("/"):
        return (
            f"{program!r} not found: a relative path is resolved against the server's working "
            f"directory {cwd} on the agent; give an absolute path, a program on the agent's "
            "PATH, or {python} for the agent's own Python"
        )
    return f"{program!r} not found on the agent"


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


def processes_with_env(name: str, value: str) -> set[ProcessId]:
    """Live processes whose environment holds ``name=value`` (inherited through any fork)."""
    found: set[ProcessId] = set()
    for proc in psutil.process_iter(["pid", "create_time"]):
        try:
            if proc.environ().get(name) == value:
                found.add(ProcessId(proc.info["pid"], proc.info["create_time"]))
        except (psutil.Error, OSError):
            continue
    return found


def process_group_members(pgid: int) -> set[ProcessId]:
    """Live members of a process group."""
    found: set[ProcessId] = set()
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                found.add(ProcessId(proc.pid, proc.info["create_time"]))
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


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
    """The stop ladder: SIGTERM the group, wait ``grace``, SIGKILL the group and every known
    descendant that left it, then wait up to ``kill_timeout`` for all of them to be gone.

    ``leader`` leads the process group (spawned with a new session). ``reap`` lets the owner
    of a Popen collect the exit status so the leader does not linger as a zombie.
    """
    pgid = leader.pid
    tracked = {leader, *known}

    def alive() -> list[ProcessId]:
        reap()
        members = process_group_members(pgid) if leader.alive() or _group_exists(pgid) else set()
        return sorted({p for p in tracked | members if p.alive()})

    if leader.alive():
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline and not should_abort():
        time.sleep(POLL_INTERVAL)
    remaining = alive()
    if not remaining:
        return StopOutcome(False, ())
    signal_group(pgid, signal.SIGKILL)
    for proc in remaining:
        proc.signal(signal.SIGKILL)
    deadline = time.monotonic() + kill_timeout
    while time.monotonic() < deadline:
        remaining = alive()
        if not remaining:
            return StopOutcome(True, ())
        for proc in remaining:  # a process may have forked during the ladder
            proc.signal(signal.SIGKILL)
        time.sleep(POLL_INTERVAL)
    return StopOutcome(True, tuple(alive()))


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
