"""The real-engine layer: a real vLLM (CPU build) under the real agent. ``make test-engines``
builds the venv (tests/engines/setup_venv.sh) and sets TUNELAB_ENGINES_VENV; ``make test`` never
collects this folder (tests/conftest.py).

The server is pinned to core 0 and every client to core 1, so timings mean something on 2 cores.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2

HERE = Path(__file__).resolve().parent
SERVER_CPU = "0"
CLIENT_CPU = "1"
START_TIMEOUT = 300.0


def vllm_env(cache: Path) -> dict[str, str]:
    """Loopback only, no telemetry, no hub, a small KV cache, a warm compile cache."""
    return {
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": SERVER_CPU,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CACHE_ROOT": str(cache),
    }


@pytest.fixture(scope="session")
def venv() -> Path:
    path = os.environ.get("TUNELAB_ENGINES_VENV")
    if not path:
        pytest.fail("TUNELAB_ENGINES_VENV is not set: run `make test-engines`")
    return Path(path)


@pytest.fixture(scope="session")
def tiny_model(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run(
        [str(venv / "bin" / "python"), "-P", str(HERE / "make_model.py"), str(out)],
        check=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="session")
def compile_cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tunelab"
    path = root / "vllm-compile-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Agent:
    proc: AgentProcess
    metrics_port: int
    stub: agent_pb2_grpc.AgentStub


@pytest.fixture(scope="session")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    metrics = free_port()
    proc = AgentProcess(
        tmp_path_factory.mktemp("agent"), ["--metrics-listen", f"127.0.0.1:{metrics}"]
    ).start()
    try:
        yield Agent(proc, metrics, proc.stub())
    finally:
        proc.terminate()


def vllm_spec(
    venv: Path, model: Path, port: int, cache: Path, *extra: str
) -> server_pb2.ServerSpec:
    argv = [
        "taskset", "-c", SERVER_CPU, str(venv / "bin" / "vllm"), "serve", str(model),
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "512", "--served-model-name", "tiny", *extra,
    ]  # fmt: skip
    return server_pb2.ServerSpec(
        argv=argv,
        port=port,
        env=vllm_env(cache),
        startup_timeout_seconds=START_TIMEOUT,
        stop_grace_seconds=30,
    )


@dataclass
class Started:
    server: server_pb2.Server  # the READY snapshot
    updates: list[server_pb2.Server]
    port_open_at: float  # wall clock when the port first accepted a connection (5 ms polls)
    spec: server_pb2.ServerSpec
    extra: dict[str, float] = field(default_factory=dict)


def watch(stub: agent_pb2_grpc.AgentStub, server_id: str) -> list[server_pb2.Server]:
    updates = []
    request = agent_pb2.WatchServerRequest(id=server_id)
    for update in stub.WatchServer(request, timeout=START_TIMEOUT):
        updates.append(update.server)
        if update.server.state not in (
            server_pb2.SERVER_STATE_PENDING,
            server_pb2.SERVER_STATE_STARTING,
            server_pb2.SERVER_STATE_LOADING,
        ):
            break
    return updates


def _port_watch(port: int, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.05):
                out.append(time.time())
                return
        except OSError:
            time.sleep(0.005)


@pytest.fixture(scope="session")
def vllm_server(
    agent: Agent, venv: Path, tiny_model: Path, compile_cache: Path
) -> Iterator[Started]:
    """One real vLLM for the session (a start costs 30-60 s of one core); stopped at the end
    when a test selection left out the test that stops it."""
    port = free_port()
    spec = vllm_spec(venv, tiny_model, port, compile_cache)
    stop = threading.Event()
    opened: list[float] = []
    poller = threading.Thread(target=_port_watch, args=(port, stop, opened), daemon=True)
    poller.start()
    t0 = time.monotonic()
    response = agent.stub.StartServer(agent_pb2.StartServerRequest(spec=spec), timeout=30)
    updates = watch(agent.stub, response.server.id)
    stop.set()
    poller.join(2)
    final = updates[-1]
    assert final.state == server_pb2.SERVER_STATE_READY, (final.message, list(final.log_tail))
    print(f"\nvLLM READY in {time.monotonic() - t0:.1f} s")
    try:
        yield Started(final, updates, opened[0] if opened else 0.0, spec)
    finally:
        request = agent_pb2.GetServerRequest(id=final.id)
        if agent.stub.GetServer(request, timeout=10).server.state == server_pb2.SERVER_STATE_READY:
            agent.stub.StopServer(agent_pb2.StopServerRequest(id=final.id), timeout=60)
            watch(agent.stub, final.id)
