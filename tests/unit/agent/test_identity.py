"""Process identity and the one signalling function: refusals that protect a root host."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.procs import identity
from tunelab.agent.runs.commandjob import confined
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.spec import ServerSpec


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_create_time_agrees_with_psutil(sleeper: subprocess.Popen[bytes]) -> None:
    stat = identity.read_stat(sleeper.pid)
    assert stat is not None and stat.ppid == os.getpid()
    assert abs(stat.create_time - psutil.Process(sleeper.pid).create_time()) < 0.05


def test_signal_exact_refuses_what_it_cannot_verify(sleeper: subprocess.Popen[bytes]) -> None:
    real = psutil.Process(sleeper.pid).create_time()
    assert not identity.signal_exact(1, psutil.Process(1).create_time(), signal.SIGCONT)
    assert not identity.signal_exact(0, 0.0, signal.SIGKILL)
    assert not identity.signal_exact(-1, real, signal.SIGKILL)
    assert not identity.signal_exact(sleeper.pid, math.nan, signal.SIGKILL)
    assert not identity.signal_exact(sleeper.pid, math.inf, signal.SIGKILL)
    assert not identity.signal_exact(sleeper.pid, real - 1000, signal.SIGKILL)  # reused pid
    assert not identity.signal_exact(os.getpid(), psutil.Process().create_time(), signal.SIGKILL)
    assert sleeper.poll() is None
    assert identity.signal_exact(sleeper.pid, real, signal.SIGKILL)
    assert sleeper.wait(5) == -signal.SIGKILL


def test_signal_exact_refuses_the_callers_own_process_group() -> None:
    same_group = subprocess.Popen(["sleep", "60"])  # not a new session: our group
    try:
        created = psutil.Process(same_group.pid).create_time()
        assert not identity.signal_exact(same_group.pid, created, signal.SIGKILL)
        assert same_group.poll() is None
    finally:
        same_group.kill()
        same_group.wait()


def test_descendants_follow_the_tree_and_skip_zombies() -> None:
    code = "import subprocess,time;subprocess.Popen(['sleep','60']);time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        for _ in range(200):
            tree = identity.descendants(os.getpid())
            if len(tree) >= 2:
                break
            time.sleep(0.01)
        assert parent.pid in tree and len(tree) >= 2
        child = next(pid for pid in tree if pid != parent.pid)
        assert identity.matches(child, tree[child])
    finally:
        for proc in psutil.Process(parent.pid).children(recursive=True):
            proc.kill()
        parent.kill()
        parent.wait()


def test_a_leader_that_exits_mid_walk_does_not_hide_its_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race a stop once lost: the walk lists the monitor's children (the leader), the
    leader exits (its SIGTERM-proof worker moves up to the monitor), then the walk reads the
    leader's children: none. That walk is not settled; the next one finds the worker."""
    monitor, leader, worker = 10, 11, 12
    exited = {"leader": False}

    def children(pid: int) -> list[int]:
        if pid == monitor:
            return [worker] if exited["leader"] else [leader]
        if pid == leader:
            exited["leader"] = True  # it exits just as its children are read
            return []
        return []

    def stat(pid: int) -> identity.ProcStat | None:
        if pid == leader:
            return identity.ProcStat(pid, "Z" if exited["leader"] else "S", monitor, 100.0)
        return identity.ProcStat(pid, "S", monitor, 200.0)

    monkeypatch.setattr(identity, "_children", children)
    monkeypatch.setattr(identity, "read_stat", stat)
    assert identity.descendants(monitor) == {worker: 200.0}


# The main thread ends alone (SYS_exit, not exit_group) and leaves a thread holding a child:
# the leader then reads as a zombie while the child still hangs under its live thread.
_THREAD_EXIT = {"x86_64": 60, "aarch64": 93}[os.uname().machine]
_ZOMBIE_LEADER = f"""
import ctypes, subprocess, threading, time
child = subprocess.Popen(["sleep", "60"])
print(child.pid, flush=True)
threading.Thread(target=time.sleep, args=(60,)).start()
ctypes.CDLL(None).syscall({_THREAD_EXIT}, 0)
"""


def test_a_leader_whose_main_thread_ended_is_walked_through_and_unsettles_the_walk() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", _ZOMBIE_LEADER], stdout=subprocess.PIPE, start_new_session=True
    )
    plain = subprocess.Popen(["true"])
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        deadline = time.monotonic() + 10
        while (identity.read_stat(leader.pid) or identity.ProcStat(0, "", 0, 0)).state != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        while plain.poll() is None and psutil.Process(plain.pid).status() != "zombie":
            time.sleep(0.01)  # a plain zombie: exited, not reaped (poll() would reap it)

        found, settled = identity._walk(os.getpid())

        assert child in found and leader.pid not in found
        assert not settled  # its last thread may exit any moment and hand the child up
        assert not identity._bare_zombie(leader.pid)
        assert identity._bare_zombie(plain.pid)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(child).kill()
        leader.kill()
        leader.wait()
        plain.wait()


def test_a_worker_handed_up_by_a_leaders_last_thread_is_not_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race a resumed stop lost: the leader reads as a zombie (its main thread is gone),
    its last thread exits as the walk reads it and hands the SIGTERM-proof worker up to the
    monitor, which the walk has already read. The monitor then took the tree for empty, set its
    ladder DONE and SIGKILLed the worker as soon as a later walk found it: no grace."""
    monitor, leader, worker = 10, 11, 12
    handed = {"up": False}

    def children(pid: int) -> list[int]:
        if pid == monitor:
            return [worker] if handed["up"] else [leader]
        handed["up"] = True
        return []

    def stat(pid: int) -> identity.ProcStat | None:
        if pid == leader:
            return identity.ProcStat(pid, "Z", monitor, 100.0)
        return identity.ProcStat(pid, "S", monitor, 200.0)

    monkeypatch.setattr(identity, "_children", children)
    monkeypatch.setattr(identity, "read_stat", stat)
    monkeypatch.setattr(identity, "_bare_zombie", lambda pid: handed["up"])
    assert identity.descendants(monitor) == {worker: 200.0}


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "../x", "a/../../x", "..", "", ".", "a\0b", "link/escape"]
)
def test_confined_refuses_paths_out_of_the_folder(tmp_path: Path, name: str) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "link").symlink_to(tmp_path)
    with pytest.raises(InvalidSpec) as refused:
        confined(tmp_path / "run", name, "spec.benchmark.command.result_file")
    assert refused.value.field == "spec.benchmark.command.result_file"


def test_confined_keeps_plain_names_inside(tmp_path: Path) -> None:
    assert confined(tmp_path, "out/result.json", "f") == tmp_path.resolve() / "out/result.json"


@pytest.mark.parametrize(
    ("pid", "create_time"), [(1, 1.0), (-5, 1.0), (42, math.nan), (42, math.inf), (42, 0.0)]
)
def test_a_forged_identity_in_a_state_file_is_rejected(pid: int, create_time: float) -> None:
    record = ServerRecord(id="s", spec=ServerSpec(argv=("x",), port=1), pid=2, create_time=1.0)
    data = record.to_dict()
    data["pid"], data["create_time"] = pid, create_time
    with pytest.raises(ValueError, match="is not a server's"):
        ServerRecord.from_dict(data)


def test_the_monitor_imports_nothing_outside_the_standard_library_but_its_own_modules() -> None:
    """It runs once per server for the server's whole life: no psutil, grpc or structlog."""
    code = (
        "import sys; before = set(sys.modules); import tunelab.agent.procs.monitor; "
        "print(' '.join(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in sys.stdlib_module_names)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded and all(m.startswith("tunelab") for m in loaded), loaded
    assert "tunelab.agent.procs.monitor" in loaded
