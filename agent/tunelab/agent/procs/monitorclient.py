"""The agent's side of a server's monitor: launch it, ask it, read what it left on disk.

The agent binds the monitor's socket itself, before the monitor exists, and hands it over as an
inherited fd: from the instant the spawn starts, a restarted agent that finds the socket can
connect and wait for an answer, so no window leaves a server nobody can find. Paths are reached
through ``/proc/self/fd/<dirfd>/…`` so a deep state dir never hits the 108-byte socket path limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.procs.monitor import EXIT_FILE, SOCKET_NAME
from tunelab.agent.procs.peercheck import check_peer, check_socket_file
from tunelab.agent.procs.process import ProcessId
from tunelab.agent.statefile import read_json
from tunelab.common.pyexec import python_module_argv
from tunelab.common.spawn import spawn

MONITOR_LOG = "monitor.log"
HANDSHAKE_TIMEOUT = 30.0
MAX_REPLY = 1 << 22


class MonitorFailed(RuntimeError):
    """The monitor could not be started or did not answer the spawn; nothing is running."""


@dataclass(frozen=True)
class MonitorStatus:
    """One answer of a live monitor."""

    monitor_pid: int
    leader: ProcessId | None
    exited: bool
    exit_code: int | None
    tree: frozenset[ProcessId]
    stop_phase: str
    escalated: bool
    kill_failed: bool
    spawn_error: dict[str, str] | None
    spec: dict[str, Any] | None

    @property
    def done(self) -> bool:
        """The server has exited and nothing of its tree is left."""
        return self.exited and not self.tree

    @classmethod
    def of(cls, data: dict[str, Any]) -> MonitorStatus:
        pid = int(data.get("pid") or 0)
        return cls(
            monitor_pid=int(data["monitor_pid"]),
            leader=ProcessId(pid, float(data["create_time"])) if pid else None,
            exited=bool(data.get("exited")),
            exit_code=None if data.get("exit_code") is None else int(data["exit_code"]),
            tree=frozenset(ProcessId(int(p), float(t)) for p, t in data.get("tree", [])),
            stop_phase=str(data.get("stop_phase", "")),
            escalated=bool(data.get("escalated")),
            kill_failed=bool(data.get("kill_failed")),
            spawn_error=data.get("spawn_error"),
            spec=data.get("spec"),
        )


@contextlib.contextmanager
def _dir_path(directory: Path, name: str) -> Iterator[str]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


class MonitorClient:
    """Talks to one server's monitor, after checking the socket's owner and peer uid
    (``peercheck``)."""

    def __init__(self, server_dir: Path) -> None:
        self.server_dir = server_dir

    def has_socket(self) -> bool:
        return (self.server_dir / SOCKET_NAME).exists()

    def _call(self, request: dict[str, Any], timeout: float) -> MonitorStatus | None:
        """The monitor's answer, or None when no monitor listens (it exited or never ran)."""
        try:
            with (
                _dir_path(self.server_dir, SOCKET_NAME) as path,
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
            ):
                sock.settimeout(timeout)
                check_socket_file(path)
                sock.connect(path)
                check_peer(sock)
                sock.sendall(json.dumps(request).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n") and len(data) < MAX_REPLY:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return None
        except OSError:  # timeout, reset, an untrusted peer: a monitor exists, no answer now
            raise
        try:
            return MonitorStatus.of(json.loads(data))
        except (ValueError, KeyError, TypeError):
            return None  # it closed without answering: it is exiting

    def status(self, timeout: float = 5.0) -> MonitorStatus | None:
        return self._call({"op": "status"}, timeout)

    def stop(self, grace: float, kill_timeout: float, reason: str) -> MonitorStatus | None:
        return self._call(
            {"op": "stop", "grace": grace, "kill_timeout": kill_timeout, "reason": reason}, 5.0
        )

    def exit_record(self) -> dict[str, Any] | None:
        """What the monitor wrote when it finished, or None (still running, or never ran)."""
        try:
            data = read_json(self.server_dir / EXIT_FILE)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def kill_orphans(seen: Iterable[ProcessId]) -> list[int]:
    """The one fallback for a monitor that vanished without an exit record (killed by someone):
    SIGKILL each process the agent saw in its tree that still lives as that exact process
    (pid + create time verified at the moment of signalling). Returns the pids signalled."""
    return [p.pid for p in sorted(seen) if p.signal(signal.SIGKILL)]


def launch_monitor(
    server_id: str, server_dir: Path, launch: dict[str, Any]
) -> tuple[subprocess.Popen[bytes], ProcessId]:
    """Start the monitor for one server and wait for its spawn report.

    Raises InvalidSpec (the server could not be spawned: nothing runs) or MonitorFailed.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _dir_path(server_dir, SOCKET_NAME) as path:
            with contextlib.suppress(FileNotFoundError):
                Path(path).unlink()  # a dead monitor's socket: the caller checked none answers
            listener.bind(path)
        listener.listen(16)
        popen = spawn(
            python_module_argv(
                "tunelab.agent.procs.monitor",
                "--server-id",
                server_id,
                "--listen-fd",
                str(listener.fileno()),
            ),
            cwd=server_dir,
            log=server_dir / MONITOR_LOG,
            handshake=True,
            pass_fds=(listener.fileno(),),
        )
    finally:
        listener.close()
    if popen.stdin is None or popen.stdout is None:  # cannot happen with PIPE; for the types
        raise MonitorFailed("the monitor has no pipes")
    with contextlib.suppress(BrokenPipeError):
        popen.stdin.write(json.dumps(launch).encode())
        popen.stdin.close()
    # the monitor answers right after its spawn attempt; a hung one is not waited on forever
    ready, _, _ = select.select([popen.stdout], [], [], HANDSHAKE_TIMEOUT)
    line = popen.stdout.readline() if ready else b""
    popen.stdout.close()
    try:
        answer = json.loads(line)
    except ValueError:
        if not ready:  # hung before it spawned anything we know of: our own child, unreaped
            popen.kill()
        popen.wait(HANDSHAKE_TIMEOUT)
        raise MonitorFailed(
            f"the monitor exited with {popen.returncode} before starting the server; "
            f"see {server_dir / MONITOR_LOG}"
        ) from None
    if not answer.get("ok"):
        popen.wait(HANDSHAKE_TIMEOUT)
        if answer.get("field"):
            raise InvalidSpec(str(answer["field"]), str(answer.get("problem", "")))
        raise MonitorFailed(str(answer.get("problem", "the monitor refused")))
    return popen, ProcessId(int(answer["pid"]), float(answer["create_time"]))
