"""Integration: a state dir is trusted only when it is ours (issue 23.2).

The real ``tunelab-agent serve``, as root (CI runs as root), against state dirs someone else
could write: it refuses them with one line naming the path and the fix, before it opens anything
there. Each canary is a root file the old agent clobbered through a planted symlink."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port
from tunelab.agent.procs.monitor import SOCKET_NAME
from tunelab.agent.procs.monitorclient import MonitorClient
from tunelab.agent.procs.peercheck import UntrustedMonitor
from tunelab.agent.statefile import read_json

NOBODY = 65534
# forged monitor answers name pid 1: a regression could only reach this test's own namespace
pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]


def serve(state_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tunelab.agent", "serve", "--listen",
               f"127.0.0.1:{free_port()}", "--state-dir", str(state_dir)]  # fmt: skip
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "root-owned-canary"
    path.write_text("precious\n")
    yield path
    assert path.read_text() == "precious\n"  # never truncated or written through


def refused_naming(result: subprocess.CompletedProcess[str], path: Path, what: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(path) in lines[0] and what in lines[0], lines[0]


def test_a_state_dir_made_by_nobody_is_refused_before_its_lock_is_opened(
    tmp_path: Path, canary: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "agent.lock").symlink_to(canary)  # the old agent truncated the canary through it
    os.chown(state, NOBODY, NOBODY)
    result = serve(state)
    refused_naming(result, state, f"owned by uid {NOBODY}")
    assert "chown 0" in result.stderr and "chmod 0700" in result.stderr


def test_a_world_writable_state_dir_or_servers_folder_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    refused_naming(serve(state), state, "writable by group or others (mode 0777)")
    state.chmod(0o700)
    (state / "servers").mkdir(mode=0o700)
    os.chown(state / "servers", NOBODY, NOBODY)
    refused_naming(serve(state), state / "servers", f"owned by uid {NOBODY}")


def test_a_lock_that_is_a_directory_or_a_symlink_is_one_line_not_a_traceback(
    tmp_path: Path, canary: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "agent.lock").mkdir()
    refused_naming(serve(state), state / "agent.lock", "cannot take the lock")
    (state / "agent.lock").rmdir()
    (state / "agent.lock").symlink_to(canary)
    refused_naming(serve(state), state / "agent.lock", "cannot take the lock")


def test_state_files_are_read_without_following_a_symlink(tmp_path: Path, canary: Path) -> None:
    forged = tmp_path / "state.json"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"id": "x"}))
    forged.symlink_to(other)
    with pytest.raises(OSError):
        read_json(forged)


def test_a_monitor_socket_set_up_by_another_uid_is_never_trusted() -> None:
    # issue 23: the root agent trusted a fake monitor socket run by nobody
    server_dir = Path(tempfile.mkdtemp(prefix="tunelab-fake-monitor-", dir="/tmp"))
    server_dir.chmod(0o777)  # nobody may bind its socket here
    fake = (
        "import json, os, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(4)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    c, _ = s.accept(); c.recv(4096)\n"
        "    c.sendall(json.dumps({'monitor_pid': os.getpid(), 'pid': 1, 'create_time': 0,\n"
        "        'exited': False, 'tree': [[1, 0]]}).encode() + b'\\n'); c.close()\n"
    )
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", fake, str(server_dir / SOCKET_NAME)],  # nobody cannot run .venv
        user=NOBODY, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        with pytest.raises(UntrustedMonitor):
            MonitorClient(server_dir).status(timeout=5)
        # the same check on the peer itself: a root-owned path to a socket nobody listens on
        os.chown(server_dir / SOCKET_NAME, 0, 0)
        with pytest.raises(UntrustedMonitor, match=f"uid {NOBODY}"):
            MonitorClient(server_dir).status(timeout=5)
    finally:
        proc.kill()
        proc.wait(5)
        shutil.rmtree(server_dir, ignore_errors=True)


def test_a_monitor_socket_of_our_own_uid_still_answers(tmp_path: Path) -> None:
    server_dir = tmp_path / "srv-own"
    server_dir.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(server_dir / SOCKET_NAME))
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        reply = {"monitor_pid": os.getpid(), "pid": 0, "create_time": 0, "exited": True}
        conn.sendall(json.dumps(reply).encode() + b"\n")
        conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    status = MonitorClient(server_dir).status(timeout=5)
    assert status is not None and status.exited
    thread.join(5)
    listener.close()


def test_a_planted_quarantine_note_symlink_is_never_written_through(
    tmp_path: Path, canary: Path
) -> None:
    # issue 23: the root agent wrote its quarantine reason through a planted `.why` symlink.
    # The note's name carries the second it is made, so one is planted for every second ahead.
    state = tmp_path / "state"
    folder = state / "servers" / "bad"
    folder.mkdir(parents=True, mode=0o700)
    (state / "servers").chmod(0o700)
    (folder / "state.json").write_text("{not json")  # unreadable: the agent quarantines it
    now = time.time()
    planted = []
    for second in range(-2, 180):
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now + second))
        why = folder / f"state.json.quarantined-{stamp}.why"
        why.symlink_to(canary)
        planted.append(why)
    agent = AgentProcess(state).start()
    try:
        [kept] = [p for p in folder.iterdir() if p.name.endswith(tuple("0123456789"))]
        assert kept.read_text() == "{not json"  # the evidence is kept...
        assert all(p.is_symlink() for p in planted)  # ...and no planted note was replaced
        assert "server_file_quarantined" in agent.log()
    finally:
        agent.terminate()
    # the canary fixture checks the root file was never written through
