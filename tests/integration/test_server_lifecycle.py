"""Integration: the real agent daemon managing real child servers over real gRPC on loopback."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import grpc
import psutil
import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import fake_spec, get, logs, start, watch_until
from tunelab.v1 import agent_pb2, server_pb2

S = server_pb2


def test_slow_loader_reports_progress_then_ready(agent: AgentProcess) -> None:
    stub = agent.stub()
    port = free_port()
    server = start(stub, fake_spec(port, "--load-seconds", "1.5", "--shards", "6"))
    assert server.state == S.SERVER_STATE_STARTING and server.pid > 0

    updates = watch_until(stub, server.id, [S.SERVER_STATE_READY])

    loading = [u for u in updates if u.state == S.SERVER_STATE_LOADING]
    assert loading, "no LOADING update with progress"
    dones = [u.progress.done for u in loading]
    assert dones == sorted(dones) and dones[-1] >= 5
    assert loading[-1].progress.total == 6
    assert loading[-1].progress.label == "Loading safetensors checkpoint shards"
    final = updates[-1]
    assert final.state == S.SERVER_STATE_READY
    assert final.progress.done == 6
    assert 1.0 < final.ready_seconds < 10.0


def test_empty_200_body_is_ready_and_ready_is_prompt(agent: AgentProcess, tmp_path: Path) -> None:
    stub = agent.stub()
    port = free_port()
    ready_file = tmp_path / "first-2xx"
    spec = fake_spec(port, "--load-seconds", "0.3", "--ready-file", str(ready_file))
    server = start(stub, spec)

    final = watch_until(stub, server.id, [S.SERVER_STATE_READY])[-1]

    assert final.state == S.SERVER_STATE_READY
    first_2xx = float(ready_file.read_text())
    # READY is stamped after the probe that got the first 2xx returned: never before it, and well
    # within the 1 s bound (benchmarks/readiness_latency.py measures the distribution).
    assert 0.0 <= final.ready_at - first_2xx < 1.0


def test_crash_mid_load_fails_at_once_with_exit_code_and_log_tail(agent: AgentProcess) -> None:
    stub = agent.stub()
    spec = fake_spec(
        free_port(),
        "--load-seconds",
        "1",
        "--shards",
        "10",
        "--crash-at-shard",
        "4",
        "--exit-code",
        "7",
        startup_timeout_seconds=600,
    )
    t0 = time.monotonic()
    server = start(stub, spec)

    final = watch_until(stub, server.id, [S.SERVER_STATE_FAILED])[-1]

    assert time.monotonic() - t0 < 10, "FAILED must come at the exit, not at the startup timeout"
    assert final.state == S.SERVER_STATE_FAILED
    assert final.exit_code == 7
    assert "while loading" in final.message
    assert any("shard 4 is corrupt" in line for line in final.log_tail)


def test_death_after_ready_is_failed_with_exit_code(agent: AgentProcess) -> None:
    stub = agent.stub()
    server = start(
        stub,
        fake_spec(
            free_port(), "--load-seconds", "0.2", "--die-after-ready", "0.5", "--exit-code", "139"
        ),
    )
    watch_until(stub, server.id, [S.SERVER_STATE_READY])

    final = watch_until(stub, server.id, [S.SERVER_STATE_FAILED])[-1]

    assert final.state == S.SERVER_STATE_FAILED
    assert final.exit_code == 139
    assert "after READY" in final.message
    assert any("illegal memory access" in line for line in final.log_tail)


def test_ready_model_waits_for_the_model_in_v1_models(agent: AgentProcess) -> None:
    stub = agent.stub()
    spec = fake_spec(
        free_port(),
        "--load-seconds",
        "0.2",
        "--model",
        "served-model",
        ready_model="wanted-model",
        startup_timeout_seconds=1.5,
    )
    server = start(stub, spec)

    final = watch_until(stub, server.id, [S.SERVER_STATE_READY])[-1]

    # /health answers 200 but the model is never listed: the startup budget runs out
    assert final.state == S.SERVER_STATE_FAILED
    assert "startup timeout" in final.message and "wanted-model" in final.message


def test_ignores_sigterm_and_grandchild_in_own_session_are_both_killed(agent: AgentProcess) -> None:
    stub = agent.stub()
    spec = fake_spec(
        free_port(),
        "--load-seconds",
        "0.2",
        "--ignore-sigterm",
        "--grandchild",
        stop_grace_seconds=1.0,
    )
    server = start(stub, spec)
    watch_until(stub, server.id, [S.SERVER_STATE_READY])
    grandchild = psutil.Process(_grandchild_pid(stub, server.id))
    assert grandchild.pid not in {
        c.pid for c in psutil.Process(server.pid).children(recursive=True)
    }
    assert os.getsid(grandchild.pid) != os.getsid(server.pid)  # out of the tree and the session

    stopped = stub.StopServer(agent_pb2.StopServerRequest(id=server.id), timeout=60).server

    assert stopped.state == S.SERVER_STATE_STOPPED
    assert "SIGKILL" in stopped.message
    assert _gone(server.pid)
    assert _gone(grandchild.pid)
    assert stopped.gpu_check_skipped  # no NVIDIA driver on this machine, and the reply says so
    assert "GPU release not checked" in stopped.message


def _gone(pid: int) -> bool:
    """Dead, or a zombie waiting for a reaper that is not ours (after an agent restart)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _grandchild_pid(stub: object, server_id: str) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text, _, _ = logs(stub, server_id)  # type: ignore[arg-type]
        found = re.search(rb"grandchild (\d+)", text)
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise TimeoutError("the fake server never reported its grandchild")


def test_port_already_taken_is_refused_and_nothing_starts(agent: AgentProcess) -> None:
    stub = agent.stub()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        before = {p.pid for p in psutil.process_iter()}

        with pytest.raises(grpc.RpcError) as info:
            start(stub, fake_spec(port), server_id="squatted")

    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert str(port) in str(info.value.details())
    listed = stub.ListServers(
        agent_pb2.ListServersRequest(include_finished=True), timeout=5
    ).servers
    assert [s.id for s in listed] == []
    assert not (agent.state_dir / "servers" / "squatted").exists()
    spawned = {p.pid for p in psutil.process_iter()} - before
    assert not any("lifecycle_server" in " ".join(_cmdline(pid)) for pid in spawned)


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def test_start_is_idempotent_on_the_caller_id(agent: AgentProcess) -> None:
    stub = agent.stub()
    spec = fake_spec(free_port(), "--load-seconds", "0.2")
    first = start(stub, spec, server_id="exp-1")
    again = start(stub, spec, server_id="exp-1")
    assert again.id == first.id == "exp-1" and again.pid == first.pid

    other = fake_spec(free_port())
    with pytest.raises(grpc.RpcError) as info:
        start(stub, other, server_id="exp-1")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_stream_logs_resumes_at_offsets_and_follow_ends_with_eof(agent: AgentProcess) -> None:
    stub = agent.stub()
    server = start(stub, fake_spec(free_port(), "--load-seconds", "0.4", "--shards", "4"))
    watch_until(stub, server.id, [S.SERVER_STATE_READY])
    whole, end, eof = logs(stub, server.id)
    assert b"model loaded" in whole and end == len(whole) and not eof

    part, _, _ = logs(stub, server.id, offset=10)
    assert part == whole[10:]
    last, _, _ = logs(stub, server.id, tail_lines=1)
    assert last == b"model loaded\n"

    stub.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=5), timeout=60)
    followed, _, eof = logs(stub, server.id, offset=end, follow=True)
    after_stop, _, _ = logs(stub, server.id)
    assert eof and followed == after_stop[end:]


def test_agent_sigkill_and_restart_readopts_ready_server(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        server = start(stub, fake_spec(free_port(), "--load-seconds", "0.2"), server_id="survivor")
        watch_until(stub, server.id, [S.SERVER_STATE_READY])

        agent.kill9()
        assert psutil.Process(server.pid).is_running()
        agent.restart()
        stub = agent.stub()

        adopted = get(stub, "survivor")
        assert adopted.state == S.SERVER_STATE_READY and adopted.pid == server.pid
        text, _, _ = logs(stub, "survivor")
        assert b"model loaded" in text
        stopped = stub.StopServer(
            agent_pb2.StopServerRequest(id="survivor", grace_seconds=5), timeout=60
        ).server
        assert stopped.state == S.SERVER_STATE_STOPPED
        assert _gone(server.pid)
    finally:
        agent.terminate()


def test_server_exiting_while_agent_down_is_failed_and_reused_pid_is_never_signalled(
    tmp_path: Path,
) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        server = start(stub, fake_spec(free_port(), "--load-seconds", "0.2"), server_id="gone")
        watch_until(stub, server.id, [S.SERVER_STATE_READY])
        agent.kill9()
        psutil.Process(server.pid).kill()
        psutil.Process(server.pid).wait(5) if psutil.pid_exists(server.pid) else None
        # Make the state file claim a live stranger's pid with a different create time: a pid
        # reused by the kernel. The agent must see the identity mismatch and leave it alone.
        state_file = agent.state_dir / "servers" / "gone" / "state.json"
        state = json.loads(state_file.read_text())
        stranger = subprocess.Popen(["sleep", "60"])
        state["pid"] = stranger.pid
        state["create_time"] = psutil.Process(stranger.pid).create_time() - 1000
        state_file.write_text(json.dumps(state))

        agent.restart()

        final = get(agent.stub(), "gone")
        assert final.state == S.SERVER_STATE_FAILED
        assert "not running" in final.message
        assert stranger.poll() is None, "the agent signalled a process whose pid was reused"
        stranger.kill()
        stranger.wait()
    finally:
        agent.terminate()
