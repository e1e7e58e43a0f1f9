"""Integration, each test in a PID + mount namespace of its own (``pidns``): the agent can never
hurt a process it did not start (pid reuse forced through ``ns_last_pid``, forged state files),
finds every server again whatever happened to its state file, and survives a full disk.

The agent, its monitors, the servers and the victims all run inside the namespace, so a
regression (a ``kill(-1)``, a SIGKILL to a reused pid) can only hit the namespace.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import psutil
import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import (
    ended,
    fake_spec,
    get,
    gone,
    reported_process,
    start,
    wait_state,
    watch_until,
)
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2, server_pb2

S = server_pb2
pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]


def wait_gone(pid: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not gone(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} still alive")
        time.sleep(0.01)


def spawn_with_pid(pid: int) -> subprocess.Popen[bytes]:
    """A stranger that gets exactly ``pid`` (ns_last_pid), leading its own group and session,
    as a process that reused a server's pid would."""
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid):  # a zombie still holds it: wait for its reaper
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {pid} was never reaped")
        time.sleep(0.01)
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
        if victim.pid == pid:
            return victim
        victim.kill()
        victim.wait()
    raise RuntimeError(f"could not get pid {pid} for the victim")


def ready_server(
    stub: agent_pb2_grpc.AgentStub, server_id: str, *args: str, **fields: object
) -> server_pb2.Server:
    spec = fake_spec(free_port(), "--load-seconds", "0.1", *args, **fields)
    server = start(stub, spec, server_id)
    watch_until(stub, server.id, [S.SERVER_STATE_READY])
    return server


def test_a_stop_never_signals_a_stranger_that_reused_the_leaders_pid(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        server = ready_server(stub, "reuse", "--worker", stop_grace_seconds=2.0)
        worker = reported_process(stub, "reuse", "worker")
        stopping = stub.StopServer.future(agent_pb2.StopServerRequest(id="reuse"), timeout=60)
        wait_gone(server.pid)  # the leader exits on SIGTERM; its worker ignores it
        victim = spawn_with_pid(server.pid)  # the kernel hands the leader's pid to a stranger

        stopped = stopping.result().server

        assert stopped.state == S.SERVER_STATE_STOPPED and "SIGKILL" in stopped.message
        assert ended(worker)
        time.sleep(0.3)
        assert victim.poll() is None, "the stop signalled the process that reused the pid"
    finally:
        agent.terminate()


def test_a_stop_resumed_after_an_agent_kill_never_signals_the_reused_pid(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        server = ready_server(stub, "resumed", "--worker", stop_grace_seconds=3.0)
        worker = reported_process(stub, "resumed", "worker")
        stopping = stub.StopServer.future(agent_pb2.StopServerRequest(id="resumed"), timeout=60)
        wait_gone(server.pid)  # the monitor's ladder is under way: SIGTERM sent, grace running
        agent.kill9()  # mid-stop: the state file says STOPPING
        stopping.cancel()  # (kept until here: a dropped future cancels its call)
        state_file = agent.state_dir / "servers" / "resumed" / "state.json"
        assert json.loads(state_file.read_text())["state"] == "STOPPING"
        victim = spawn_with_pid(server.pid)

        agent.restart()
        stopped = wait_state(agent.stub(), "resumed", S.SERVER_STATE_STOPPED)

        assert ended(worker)
        time.sleep(0.3)
        assert victim.poll() is None, "the resumed stop signalled the process that reused the pid"
        assert "stop requested" in stopped.message
        assert "after SIGKILL" in stopped.message  # the worker had its whole grace, then SIGKILL
    finally:
        agent.terminate()


@pytest.mark.parametrize("forgery", ["pid-1", "nan-create-time"])
def test_a_forged_state_file_in_stopping_signals_nobody(tmp_path: Path, forgery: str) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        stub = agent.stub()
        server = ready_server(stub, "forged")
        agent.kill9()
        state_file = agent.state_dir / "servers" / "forged" / "state.json"
        state = json.loads(state_file.read_text())
        state["state"] = "STOPPING"
        if forgery == "pid-1":  # the ladder of old sent kill(-1): every process on the host
            state["pid"], state["create_time"] = 1, psutil.Process(1).create_time()
        else:  # NaN compared false against everything and passed the identity check
            state["pid"], state["create_time"] = victim.pid, math.nan
        state["descendants"] = [[victim.pid, math.nan]]
        state_file.write_text(json.dumps(state))

        agent.restart()
        stub = agent.stub()

        time.sleep(0.5)
        assert victim.poll() is None and psutil.pid_exists(1)
        info = stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=10)
        assert [Path(q.path) for q in info.quarantined_state_files] == [state_file]
        found = get(stub, "forged")  # rebuilt from its monitor, with the real pid
        assert found.pid == server.pid and not gone(server.pid)
        stopped = stub.StopServer(agent_pb2.StopServerRequest(id="forged"), timeout=60).server
        assert stopped.state == S.SERVER_STATE_STOPPED and gone(server.pid)
        assert victim.poll() is None
    finally:
        victim.kill()
        agent.terminate()


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "empty": lambda text: "",
    "truncated": lambda text: text[: len(text) // 2],
    "garbage": lambda text: "\x00\xff not json {{{",
    "wrong-types": lambda text: json.dumps({**json.loads(text), "pid": "abc", "spec": [1]}),
    "list": lambda text: "[1, 2, 3]",
}


def test_every_server_is_found_again_whatever_happened_to_its_state_file(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        servers = {name: ready_server(stub, name) for name in [*CORRUPTIONS, "mine", "other"]}
        agent.kill9()
        folder = agent.state_dir / "servers"
        originals = {}
        for name, corrupt in CORRUPTIONS.items():
            path = folder / name / "state.json"
            originals[name] = path.read_text()
            path.write_text(corrupt(originals[name]))
        # a state file whose id is another server's must not overwrite that server's record
        other_before = (folder / "other" / "state.json").read_text()
        (folder / "mine" / "state.json").write_text(other_before)

        agent.restart()
        stub = agent.stub()

        info = stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=10)
        quarantined = {Path(q.path).parent.name: q for q in info.quarantined_state_files}
        assert set(quarantined) == {*CORRUPTIONS, "mine"}
        for name, item in quarantined.items():
            kept = Path(item.kept_as)
            assert kept.exists() and kept.parent == folder / name, item
            if name in originals:
                assert kept.read_text() == CORRUPTIONS[name](originals[name])
        assert "does not match its folder" in quarantined["mine"].reason
        assert json.loads((folder / "other" / "state.json").read_text())["id"] == "other"
        for name, server in servers.items():
            found = wait_state(stub, name, S.SERVER_STATE_READY)
            assert found.pid == server.pid, name
        assert servers["other"].pid != servers["mine"].pid
        for name, server in servers.items():
            stopped = stub.StopServer(agent_pb2.StopServerRequest(id=name), timeout=60).server
            assert stopped.state == S.SERVER_STATE_STOPPED and gone(server.pid), name
    finally:
        agent.terminate()


def _fill(path: Path) -> None:
    """Fill the file system until ENOSPC (unbuffered, so the error comes from write itself)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_full_state_disk_spawns_nothing_loses_nothing_and_recovers(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state_dir)], check=True
    )
    agent = AgentProcess(state_dir)
    agent.log_path = tmp_path / "agent.log"  # the agent's own log stays off the full disk
    agent.start()
    filler = state_dir / "filler"
    try:
        stub = agent.stub()
        _fill(filler)
        port = free_port()
        with pytest.raises(grpc.RpcError) as refused:
            start(stub, fake_spec(port, "--load-seconds", "0.1"), "full")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = str(refused.value.details())
        assert str(state_dir) in details and "nothing was started" in details
        assert not any(str(port) in " ".join(p.cmdline()) for p in psutil.process_iter())
        assert not list(stub.ListServers(agent_pb2.ListServersRequest(), timeout=5).servers)

        filler.unlink()
        server = ready_server(stub, "full")
        _fill(filler)  # full again while it runs: the stop must still happen, in memory
        stopped = stub.StopServer(agent_pb2.StopServerRequest(id="full"), timeout=60).server
        assert stopped.state == S.SERVER_STATE_STOPPED and gone(server.pid)
        state_file = state_dir / "servers" / "full" / "state.json"
        assert json.loads(state_file.read_text())["state"] != "STOPPED"  # not on disk yet

        filler.unlink()
        deadline = time.monotonic() + 10
        while json.loads(state_file.read_text())["state"] != "STOPPED":
            assert time.monotonic() < deadline, "the STOPPED record never reached the disk"
            time.sleep(0.1)
        exit_file = state_dir / "servers" / "full" / "exit.json"
        while not exit_file.exists():  # the monitor retried its exit record too
            assert time.monotonic() < deadline + 5, "the monitor never wrote its exit record"
            time.sleep(0.1)
        assert get(stub, "full").state == S.SERVER_STATE_STOPPED
    finally:
        agent.terminate()
        subprocess.run(["umount", "-l", str(state_dir)], check=False)


FILL_AND_REPORT = (
    "import json,os,sys;json.dump({'ok':1},open('out.json','w'));"
    "fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT)\n"
    "try:\n while True: os.write(fd,b'0'*65536)\nexcept OSError: pass"
)


def test_a_run_that_meets_a_full_disk_finishes_once_space_is_freed(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state_dir)], check=True
    )
    agent = AgentProcess(state_dir)
    agent.log_path = tmp_path / "agent.log"
    agent.start()
    filler = state_dir / "filler"
    try:
        stub = agent.stub()
        port = free_port()
        spec = run_pb2.RunSpec(
            server=fake_spec(port, "--load-seconds", "0.1", stop_grace_seconds=2),
            benchmark=run_pb2.BenchmarkSpec(
                command=run_pb2.CommandBenchmark(
                    argv=[sys.executable, "-c", FILL_AND_REPORT, str(filler)],
                    result_file="out.json",
                )
            ),
        )
        stub.StartRun(agent_pb2.StartRunRequest(run_id="full-run", spec=spec), timeout=10)
        deadline = time.monotonic() + 30
        while not (filler.exists() and shutil.disk_usage(state_dir).free < 65536):
            assert time.monotonic() < deadline, "the benchmark never filled the disk"
            time.sleep(0.05)
        time.sleep(1.5)  # the result write fails and is retried meanwhile
        run = stub.GetRun(agent_pb2.GetRunRequest(run_id="full-run"), timeout=10).run
        assert run.state == run_pb2.RUN_STATE_BENCHMARKING  # waiting for the disk, not failed

        filler.unlink()
        while run.state != run_pb2.RUN_STATE_SUCCEEDED:
            assert time.monotonic() < deadline + 30, run
            time.sleep(0.1)
            run = stub.GetRun(agent_pb2.GetRunRequest(run_id="full-run"), timeout=10).run
        server = get(stub, run.server_id)
        assert server.state == S.SERVER_STATE_STOPPED and gone(server.pid)
        assert json.loads((state_dir / "runs" / "full-run" / "result.json").read_text()) == {
            "ok": 1
        }
    finally:
        agent.terminate()
        subprocess.run(["umount", "-l", str(state_dir)], check=False)
