"""The per-server monitor process (like containerd-shim or conmon): ``python -P -m
tunelab.agent.procs.monitor --server-id ID --listen-fd N``, started by the agent in a session of
its own, one per server.

It is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every descendant of the server — also one
that double-forks, calls setsid and drops its environment — stays in its tree instead of
reparenting to init. It spawns the server, reaps everything, records the server's exit code in
``exit.json`` (retrying while the disk is full), and outlives agent restarts. It answers one JSON
line per connection on the Unix socket ``monitor.sock`` (bound by the agent before this process
exists, so the server is discoverable from the first instant): ``status`` and ``stop``. It signals
only its own live descendants, each verified at that moment (:func:`identity.signal_exact`).

Exit: once the server has exited, every descendant is gone and ``exit.json`` is on disk.
Stdlib only, single-threaded, idle unless a child exits or the agent asks.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tunelab.agent.procs import identity
from tunelab.agent.procs import ladder as stop_ladder
from tunelab.agent.procs.ladder import Ladder, Phase
from tunelab.agent.statefile import write_json_atomic
from tunelab.common.spawn import SpawnRefused, spawn

PR_SET_CHILD_SUBREAPER = 36
SOCKET_NAME = "monitor.sock"
EXIT_FILE = "exit.json"
MAX_LAUNCH = 1 << 20
MAX_REQUEST = 1 << 16
REQUEST_DEADLINE = 1.0  # a whole request line, not each byte of it (a trickle held the monitor)
IDLE_WAKE = 1.0  # retry a failed exit.json write this often
STOP_WAKE = 0.02  # how often the ladder looks at the tree while stopping


class Monitor:
    def __init__(self, server_id: str, listener: socket.socket, launch: dict[str, Any]) -> None:
        self.server_id = server_id
        self.listener = listener
        self.launch = launch
        self.pid = 0
        self.create_time = 0.0
        self.spawn_error: dict[str, str] | None = None
        self.exit_code: int | None = None
        self.exited_at = 0.0
        self.ladder: Ladder | None = None
        self.tree: dict[int, float] = {}
        self.exit_written = False
        self.empty_since: float | None = None  # monotonic time of the first empty look
        self._popen: subprocess.Popen[bytes] | None = None

    # --- spawn -------------------------------------------------------------------------------

    def spawn(self) -> None:
        argv = list(self.launch["argv"])
        try:
            self._popen = spawn(
                argv,
                cwd=Path(self.launch["cwd"]),
                log=Path(self.launch["log"]),
                env=self.launch.get("env", {}),
                field=str(self.launch.get("field", "spec")),
            )
        except SpawnRefused as exc:
            self._refuse(exc.field, exc.problem)
            return
        except OSError as exc:
            field_name = f"{self.launch.get('field', 'spec')}.argv[0]"
            self._refuse(field_name, f"cannot start {argv[0]!r}: {exc.strerror}")
            return
        self.pid = self._popen.pid
        stat = identity.read_stat(self.pid)
        self.create_time = stat.create_time if stat is not None else time.time()

    def _refuse(self, field_name: str, problem: str) -> None:
        self.spawn_error = {"field": field_name, "problem": problem}
        self.exit_code = None
        self.exited_at = time.time()

    # --- the loop ----------------------------------------------------------------------------

    def serve(self, wakeup: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ, "client")
        selector.register(wakeup, selectors.EVENT_READ, "signal")
        while True:
            self.reap()
            if self.ladder is not None or self.server_gone():
                self.advance_stop()
            if self.spawn_error is not None:
                return  # nothing ran; the agent has the reason from the handshake
            if self.finished():
                self.write_exit()
                if self.exit_written:
                    return
            stopping = self.ladder is not None and self.ladder.phase is not Phase.DONE
            timeout = STOP_WAKE if stopping or self._confirming() else IDLE_WAKE
            for key, _ in selector.select(timeout):
                if key.data == "signal":
                    _drain(wakeup)
                else:
                    self.answer_one()

    def server_gone(self) -> bool:
        return self.spawn_error is not None or (self.pid != 0 and self.exited_at > 0)

    def finished(self) -> bool:
        """Exit.json is final, so an empty tree must read empty on two turns of the loop,
        STOP_WAKE apart (the loop keeps answering meanwhile)."""
        if self.spawn_error is not None:
            return True
        if not self.server_gone() or self.scan():
            self.empty_since = None
            return False
        now = time.monotonic()
        if self.empty_since is None:
            self.empty_since = now
        return now - self.empty_since >= STOP_WAKE

    def _confirming(self) -> bool:
        """An empty tree is waiting for its second look."""
        return self.empty_since is not None and time.monotonic() - self.empty_since < STOP_WAKE

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid and self.exited_at == 0:
                self.exit_code = os.waitstatus_to_exitcode(status)
                self.exited_at = time.time()
                if self._popen is not None:
                    self._popen.returncode = self.exit_code  # reaped here, not by Popen

    def scan(self) -> dict[int, float]:
        self.tree = identity.descendants(os.getpid())
        return self.tree

    # --- stopping ----------------------------------------------------------------------------

    def request_stop(self, grace: float, kill_timeout: float, reason: str) -> None:
        if self.ladder is not None:
            return
        self.ladder, signals = stop_ladder.begin(
            grace, kill_timeout, reason, self.scan(), time.monotonic()
        )
        _send(signals)

    def advance_stop(self) -> None:
        """One step of the ladder (scan → step → signal_exact); also kills what a server that
        exited on its own left behind (:mod:`ladder` has the rules)."""
        now = time.monotonic()
        tree = self.scan()
        if self.ladder is None:  # the server exited by itself: its leftovers get no grace
            self.ladder = stop_ladder.for_leftovers(now)
        self.ladder, signals = stop_ladder.step(self.ladder, tree, now)
        _send(signals)

    # --- the socket --------------------------------------------------------------------------

    def answer_one(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(1.0)
            try:
                if not _peer_allowed(conn):
                    return
                request = json.loads(_read_line(conn))
                reply = self.handle(request if isinstance(request, dict) else {})
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except (OSError, ValueError):
                return

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "stop":
            self.request_stop(
                float(request.get("grace", 30.0)),
                float(request.get("kill_timeout", 10.0)),
                str(request.get("reason", "stop requested")),
            )
            self.advance_stop()
        return self.status()

    def status(self) -> dict[str, Any]:
        ladder = self.ladder
        tree = self.scan()
        return {
            "server_id": self.server_id,
            "monitor_pid": os.getpid(),
            "pid": self.pid,
            "create_time": self.create_time,
            "spawn_error": self.spawn_error,
            "exited": self.server_gone(),
            "exit_code": self.exit_code,
            "exited_at": self.exited_at,
            "tree": [[pid, ct] for pid, ct in sorted(tree.items())],
            "stop_phase": ladder.phase.value if ladder else "",
            "escalated": bool(ladder and ladder.escalated),
            "kill_failed": bool(ladder and ladder.kill_failed and tree),
            "spec": self.launch.get("spec"),
        }

    def write_exit(self) -> None:
        if self.exit_written:
            return
        ladder = self.ladder
        document = {
            "server_id": self.server_id,
            "exit_code": self.exit_code,
            "exited_at": self.exited_at,
            "spawn_error": self.spawn_error,
            "stop_requested": bool(ladder and not ladder.for_leftovers),
            "escalated": bool(ladder and ladder.escalated),
            "spec": self.launch.get("spec"),
        }
        try:
            write_json_atomic(Path(EXIT_FILE), document)
        except OSError as exc:  # ENOSPC, EIO: keep the code in memory, serve it, retry
            if _folder_removed():
                # nobody can ever read it (the state dir was deleted): retrying kept this
                # process alive forever, with nothing left to watch
                _say(f"cannot write {EXIT_FILE}: its folder was removed; exiting without it")
                self.exit_written = True
                return
            _say(f"cannot write {EXIT_FILE}: {exc}; retrying")
            return
        self.exit_written = True


def _send(signals: tuple[stop_ladder.Signal, ...]) -> None:
    """Each signal to exactly that process, verified at this moment."""
    for sent in signals:
        identity.signal_exact(sent.pid, sent.create_time, sent.sig)


def _folder_removed() -> bool:
    """The working directory (the server's folder) was deleted: a removed directory has no
    links left, though this process still holds it."""
    try:
        return Path().stat().st_nlink == 0
    except OSError:
        return True


def _say(message: str) -> None:
    """A line for monitor.log; that log may sit on the very disk that is full."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"monitor: {message}\n")
        sys.stderr.flush()


def _read_line(conn: socket.socket, deadline: float = REQUEST_DEADLINE) -> bytes:
    """One request line, all of it within ``deadline`` seconds (TimeoutError past it)."""
    ends = time.monotonic() + deadline
    data = b""
    while b"\n" not in data and len(data) < MAX_REQUEST:
        left = ends - time.monotonic()
        if left <= 0:
            raise TimeoutError("request line not complete within its deadline")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def _peer_allowed(conn: socket.socket) -> bool:
    """Only root or this monitor's own user may talk to it (the socket is in a 0700 folder too)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid in (0, os.geteuid())


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except (BlockingIOError, InterruptedError):
        return


def set_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _handshake(document: dict[str, Any]) -> None:
    """Tell the agent how the spawn went (a line on stdout), then let go of the pipes."""
    with contextlib.suppress(OSError):  # the agent died meanwhile: the next one asks the socket
        os.write(1, json.dumps(document).encode() + b"\n")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tunelab-monitor")
    parser.add_argument("--server-id", required=True)
    parser.add_argument("--listen-fd", type=int, required=True)
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.listen_fd)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_subreaper()
    try:
        launch = json.loads(sys.stdin.buffer.read(MAX_LAUNCH))
    except ValueError as exc:  # the agent died while writing it: nothing was started
        _handshake({"ok": False, "field": "", "problem": f"launch document unreadable: {exc}"})
        return 1
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    monitor = Monitor(args.server_id, listener, launch)
    spec_grace = float((launch.get("spec") or {}).get("stop_grace", 30.0))
    signal.signal(
        signal.SIGTERM,
        lambda *_: monitor.request_stop(spec_grace, 10.0, "monitor got SIGTERM"),
    )
    monitor.spawn()
    if monitor.spawn_error is not None:
        _handshake({"ok": False, **monitor.spawn_error})
    else:
        _handshake({"ok": True, "pid": monitor.pid, "create_time": monitor.create_time})
    monitor.serve(wake_r)
    with contextlib.suppress(OSError):
        Path(SOCKET_NAME).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
