"""Integration: engine profiles under the real agent, with a child that replays captured engine
logs (phases, progress per phase, probe etiquette, failure_reason, leftovers removed on stop)."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import get, start, watch_until
from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2

S = server_pb2
ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "fakes" / "engine_replay.py"
FIXTURES = ROOT / "fixtures" / "engines"


@pytest.fixture
def stub(agent: AgentProcess) -> Iterator[agent_pb2_grpc.AgentStub]:
    """The agent's stub; every server still live at the end is stopped (no orphans)."""
    client = agent.stub()
    yield client
    for server in client.ListServers(agent_pb2.ListServersRequest(), timeout=10).servers:
        client.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=2), timeout=30)


def replay_spec(port: int, fixture: str, *args: str, engine: str = "") -> S.ServerSpec:
    argv = [sys.executable, str(REPLAY), "--port", str(port), "--replay", str(FIXTURES / fixture)]
    return S.ServerSpec(argv=[*argv, *args], port=port, engine=engine, startup_timeout_seconds=60)


def test_vllm_log_gives_phases_with_progress_and_one_probe_request(
    stub: agent_pb2_grpc.AgentStub, tmp_path: Path
) -> None:
    count = tmp_path / "requests"
    spec = replay_spec(
        free_port(),
        "vllm-0.32-cpu-start.log",
        "--seconds",
        "1.5",
        "--listen",
        "late",
        "--requests-file",
        str(count),
        engine="vllm",
    )
    server = start(stub, spec)
    updates = watch_until(stub, server.id, [S.SERVER_STATE_READY], timeout=120)
    final = updates[-1]
    assert final.state == S.SERVER_STATE_READY, final.message
    assert final.engine == "vllm"
    phases = [p.phase for p in final.phases]
    assert phases == [
        S.SERVER_PHASE_IMPORTING,
        S.SERVER_PHASE_LOADING_WEIGHTS,
        S.SERVER_PHASE_COMPILING,
        S.SERVER_PHASE_WARMING_UP,
        S.SERVER_PHASE_READY,
    ]
    assert final.phase == S.SERVER_PHASE_READY
    assert all(p.seconds >= 0 for p in final.phases)
    assert final.progress.phase == S.SERVER_PHASE_LOADING_WEIGHTS
    assert (final.progress.done, final.progress.total) == (4, 4)
    # watchers see a phase before READY (which ones depends on how often the log is read)
    assert any(
        u.state == S.SERVER_STATE_LOADING and u.phase > S.SERVER_PHASE_IMPORTING for u in updates
    )
    # vLLM opens its port only when ready: TCP connects until then, then one GET
    assert int(count.read_text().split()[0]) == 0
    assert final.probe_requests == 1


def test_sglang_early_port_is_probed_slowly_and_ready_line_makes_it_prompt(
    stub: agent_pb2_grpc.AgentStub, tmp_path: Path
) -> None:
    count = tmp_path / "requests"
    spec = replay_spec(
        free_port(),
        "sglang-start-from-source-strings.log",
        "--seconds",
        "4",
        "--listen",
        "early",
        "--requests-file",
        str(count),
    )
    spec.argv[1:1] = ["-X", "sglang.launch_server"]  # an argv naming SGLang: detected, not given
    server = start(stub, spec)
    final = watch_until(stub, server.id, [S.SERVER_STATE_READY], timeout=120)[-1]
    assert final.state == S.SERVER_STATE_READY, final.message
    assert final.engine == "sglang"
    before, ready_since = count.read_text().split()
    # 4 s with the port open and 503: backing off 0.5, 1, 2 s keeps it to a handful
    assert int(before) <= 5, f"{before} GETs before ready"
    assert final.ready_at - float(ready_since) < 0.5
    phases = [p.phase for p in final.phases]
    assert S.SERVER_PHASE_CAPTURING_CUDA_GRAPHS in phases
    assert S.SERVER_PHASE_AUTOTUNING in phases


def test_missing_model_and_bad_flag_fail_with_their_reason(stub: agent_pb2_grpc.AgentStub) -> None:
    cases = [
        ("vllm-0.32-cpu-missing-model.log", "1", S.FAILURE_REASON_MODEL_NOT_FOUND, "Repo id"),
        ("vllm-0.32-cpu-unknown-flag.log", "2", S.FAILURE_REASON_BAD_ARGUMENT, "--bogus-flag"),
    ]
    for fixture, code, reason, needle in cases:
        spec = replay_spec(free_port(), fixture, "--seconds", "0.3", "--exit-code", code)
        server = start(stub, spec)
        final = watch_until(stub, server.id, [S.SERVER_STATE_FAILED], timeout=120)[-1]
        assert final.state == S.SERVER_STATE_FAILED
        assert final.failure_reason == reason, (fixture, final.message)
        assert needle in final.failure_line
        assert S.FailureReason.Name(reason).removeprefix("FAILURE_REASON_") in final.message


def test_stop_removes_the_shm_and_socket_files_its_processes_held(
    stub: agent_pb2_grpc.AgentStub, tmp_path: Path
) -> None:
    name = f"psm_tunelab_test_{uuid.uuid4().hex[:8]}"
    stranger = Path("/dev/shm") / f"tunelab_test_stranger_{uuid.uuid4().hex[:8]}"
    stranger.write_bytes(b"not the server's")
    sock = tmp_path / "ipc.sock"
    try:
        spec = replay_spec(
            free_port(),
            "vllm-0.32-cpu-start.log",
            "--seconds",
            "0.2",
            "--shm",
            name,
            "--unix-socket",
            str(sock),
        )
        server = start(stub, spec)
        watch_until(stub, server.id, [S.SERVER_STATE_READY], timeout=120)
        assert (Path("/dev/shm") / name).exists() and sock.exists()
        time.sleep(1.2)  # one process scan sees what the server holds
        stub.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=5), timeout=30)
        final = watch_until(stub, server.id, [S.SERVER_STATE_STOPPED], timeout=120)[-1]
        final = get(stub, server.id)
        assert final.state == S.SERVER_STATE_STOPPED, final.message
        assert not (Path("/dev/shm") / name).exists()
        assert not sock.exists()
        assert sorted(final.leftovers_removed) == sorted([f"/dev/shm/{name}", str(sock)])
        assert stranger.exists(), "a file no process of the server held must stay"
    finally:
        stranger.unlink(missing_ok=True)
        (Path("/dev/shm") / name).unlink(missing_ok=True)
