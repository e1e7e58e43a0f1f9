"""Integration, in a PID + mount namespace (``pidns``): identity is proven, not recorded (23.3).

A forged ``state.json`` names a stranger's real pid *and its real start time*; the server's
monitor is then killed, so no monitor vouches for anything. The old agent found the pair
"verified" and SIGKILLed the stranger (``killed leftover pids [51]``); now a process without a
monitor to vouch for it is signalled only when it carries the server's id in its environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import ended, fake_spec, gone, start, wait_state, watch_until
from tunelab.agent.procs.identityproof import carries_server_id
from tunelab.v1 import agent_pb2, server_pb2

S = server_pb2
pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]


def test_a_forged_real_pid_and_start_time_is_not_killed_when_the_monitor_is_gone(
    tmp_path: Path,
) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        stub = agent.stub()
        server = start(stub, fake_spec(free_port(), "--load-seconds", "0.1"), "forged")
        watch_until(stub, server.id, [S.SERVER_STATE_READY])
        assert carries_server_id(server.pid, "forged")  # what the real server has
        monitor = psutil.Process(server.pid).parent()
        assert monitor is not None
        agent.kill9()
        os.kill(monitor.pid, signal.SIGKILL)  # gone without an exit record
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not gone(server.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        state_file = agent.state_dir / "servers" / "forged" / "state.json"
        state = json.loads(state_file.read_text())
        created = psutil.Process(victim.pid).create_time()
        state["pid"], state["create_time"] = victim.pid, created  # real, and verifiable
        state["descendants"] = [[victim.pid, created]]
        state_file.write_text(json.dumps(state))

        agent.restart()
        failed = wait_state(agent.stub(), "forged", S.SERVER_STATE_FAILED)

        assert victim.poll() is None, "a forged state file got a stranger killed"
        assert "killed leftover pids" not in failed.message
        assert not carries_server_id(victim.pid, "forged")
    finally:
        victim.kill()
        agent.terminate()


def test_a_recorded_pid_that_differs_from_the_live_monitors_is_replaced_and_never_signalled(
    tmp_path: Path,
) -> None:
    """A forged ``state.json`` names a stranger's real pid and start time while the server's
    monitor still runs: the monitor's leader is the authority, the record is corrected (a
    ``recorded_pid_differs_from_monitor`` warning) and a stop signals the real server only."""
    agent = AgentProcess(tmp_path / "agent").start()
    victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        stub = agent.stub()
        server = start(stub, fake_spec(free_port(), "--load-seconds", "0.1"), "moved")
        watch_until(stub, server.id, [S.SERVER_STATE_READY])
        real = psutil.Process(server.pid)
        agent.kill9()  # the monitor and its server live on
        state_file = agent.state_dir / "servers" / "moved" / "state.json"
        state = json.loads(state_file.read_text())
        assert state["pid"] == server.pid
        created = psutil.Process(victim.pid).create_time()
        state["pid"], state["create_time"] = victim.pid, created  # real, and verifiable
        state_file.write_text(json.dumps(state))

        agent.restart()
        adopted = wait_state(agent.stub(), "moved", S.SERVER_STATE_READY)
        assert adopted.pid == server.pid  # the monitor's, not the forged one
        assert json.loads(state_file.read_text())["pid"] == server.pid  # and the record too
        assert "recorded_pid_differs_from_monitor" in agent.log()

        stub = agent.stub()
        stopped = stub.StopServer(agent_pb2.StopServerRequest(id="moved"), timeout=60).server
        assert stopped.state == S.SERVER_STATE_STOPPED, stopped.message
        assert ended(real)
        assert victim.poll() is None, "a forged recorded pid got a stranger signalled"
    finally:
        victim.kill()
        agent.terminate()


def test_carries_server_id_reads_the_environment_of_the_process(tmp_path: Path) -> None:
    marked = subprocess.Popen(["sleep", "30"], env={"TUNELAB_SERVER_ID": "srv-x", "PATH": "/bin"})
    try:
        # Popen returns once the exec has begun (vfork wakes the parent at exec_mmap), but the
        # kernel records where the new environment lies a moment later (create_elf_tables):
        # until then /proc/PID/environ reads empty. Wait for the exec to finish, not a guess.
        environ = Path(f"/proc/{marked.pid}/environ")
        deadline = time.monotonic() + 10
        while not environ.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert carries_server_id(marked.pid, "srv-x")
        assert not carries_server_id(marked.pid, "srv-y")
        assert not carries_server_id(marked.pid, "srv")  # the whole value, not a prefix
        assert not carries_server_id(1, "srv-x")
    finally:
        marked.kill()
        marked.wait(5)
