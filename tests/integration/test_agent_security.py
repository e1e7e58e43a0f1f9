"""Integration: authentication, listener safety and spec validation on the real agent daemon."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.agent_proc import AgentProcess
from tests.support.certs import make_pki
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port
from tests.support.servers import fake_spec
from tunelab.common.auth import ClientAuth
from tunelab.controller.aiocalls import AioStartRuns, StartRunCall
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2, server_pb2

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def token_agent(tmp_path: Path) -> Iterator[AgentProcess]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    agent = AgentProcess(tmp_path / "agent", ["--token-file", str(token_file)], token=TOKEN)
    agent.start()
    yield agent
    agent.terminate()


def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()


def test_calls_without_or_with_a_wrong_token_are_refused(token_agent: AgentProcess) -> None:
    anonymous = token_agent.stub(token="")
    wrong = token_agent.stub(token="not-the-token")
    request = agent_pb2.StartServerRequest(spec=fake_spec(free_port()))

    assert (
        _code(lambda: anonymous.GetInfo(agent_pb2.GetInfoRequest(), timeout=5))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    assert (
        _code(lambda: wrong.GetInfo(agent_pb2.GetInfoRequest(), timeout=5))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    assert (
        _code(lambda: anonymous.StartServer(request, timeout=5)) == grpc.StatusCode.UNAUTHENTICATED
    )
    assert (
        _code(lambda: wrong.StopServer(agent_pb2.StopServerRequest(id="x"), timeout=5))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    stream = anonymous.WatchServer(agent_pb2.WatchServerRequest(id="x"), timeout=5)
    assert _code(lambda: next(iter(stream))) == grpc.StatusCode.UNAUTHENTICATED
    # ProfileServer starts something on a server: it needs the token like the rest
    profile = anonymous.ProfileServer(
        agent_pb2.ProfileServerRequest(id="x", window_seconds=1), timeout=5
    )
    assert _code(lambda: next(iter(profile))) == grpc.StatusCode.UNAUTHENTICATED
    # nothing was started by the refused StartServer
    listed = token_agent.stub().ListServers(
        agent_pb2.ListServersRequest(include_finished=True), timeout=5
    )
    assert list(listed.servers) == []


def test_right_token_works_and_health_needs_none(token_agent: AgentProcess) -> None:
    info = token_agent.stub().GetInfo(agent_pb2.GetInfoRequest(), timeout=5)
    assert len(info.instance_id) == 32
    with grpc.insecure_channel(token_agent.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service="tunelab.v1.Agent"), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "tunelab.agent",
        "serve",
        "--state-dir",
        str(tmp_path / "s"),
        *args,
    ]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30)


def test_non_loopback_listen_without_auth_is_refused(tmp_path: Path) -> None:
    result = _serve(tmp_path, "--listen", f"0.0.0.0:{free_port()}")
    assert result.returncode == 2
    assert "refusing to listen" in result.stderr and "--token-file" in result.stderr


def test_non_loopback_listen_with_a_token_is_allowed(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    agent = AgentProcess(tmp_path / "agent", ["--token-file", str(token_file)], token=TOKEN)
    agent.address = f"0.0.0.0:{agent.port}"
    agent.command = lambda: [  # type: ignore[method-assign]
        sys.executable,
        "-m",
        "tunelab.agent",
        "serve",
        "--listen",
        f"0.0.0.0:{agent.port}",
        "--state-dir",
        str(agent.state_dir),
        "--token-file",
        str(token_file),
    ]
    agent.start()
    try:
        reply = agent_pb2_grpc.AgentStub(
            ClientAuth(token=TOKEN).channel(f"127.0.0.1:{agent.port}")
        ).GetInfo(agent_pb2.GetInfoRequest(), timeout=5)
        assert reply.instance_id
    finally:
        agent.terminate()


def test_mtls_accepts_only_clients_with_a_certificate_from_the_ca(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    stranger = make_pki(tmp_path / "other", "some other CA")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tunelab.agent",
            "serve",
            "--listen",
            f"0.0.0.0:{port}",
            "--state-dir",
            str(tmp_path / "state"),
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.server_key),
            "--tls-client-ca",
            str(pki.ca),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        good = ClientAuth(tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
        stub = agent_pb2_grpc.AgentStub(good.channel(f"localhost:{port}"))
        info = None
        for _ in range(100):
            try:
                info = stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=2, wait_for_ready=True)
                break
            except grpc.RpcError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert info is not None and info.instance_id

        no_cert = agent_pb2_grpc.AgentStub(ClientAuth(tls_ca=pki.ca).channel(f"localhost:{port}"))
        assert (
            _code(lambda: no_cert.GetInfo(agent_pb2.GetInfoRequest(), timeout=3))
            == grpc.StatusCode.UNAVAILABLE
        )
        foreign = ClientAuth(
            tls_ca=pki.ca, tls_cert=stranger.client_cert, tls_key=stranger.client_key
        )
        foreign_stub = agent_pb2_grpc.AgentStub(foreign.channel(f"localhost:{port}"))
        assert (
            _code(lambda: foreign_stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=3))
            == grpc.StatusCode.UNAVAILABLE
        )
    finally:
        proc.terminate()
        proc.wait(15)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (server_pb2.ServerSpec(argv=[], port=8000), "spec.argv"),
        (
            server_pb2.ServerSpec(argv=["true"], port=8000, env={"BAD-NAME": "1"}),
            "spec.env['BAD-NAME']",
        ),
        (server_pb2.ServerSpec(argv=["true"], port=8000, env={"A": "x\0y"}), "spec.env['A']"),
        (server_pb2.ServerSpec(argv=["true"], port=70000), "spec.port"),
        (server_pb2.ServerSpec(argv=["true"], port=0), "spec.port"),
        (server_pb2.ServerSpec(argv=["true"], port=8000, cwd="relative/dir"), "spec.cwd"),
        (server_pb2.ServerSpec(argv=["true"], port=8000, ready_path="health"), "spec.ready_path"),
        (server_pb2.ServerSpec(argv=["/no/such/program"], port=8001), "spec.argv[0]"),
        (server_pb2.ServerSpec(argv=["true"], port=8000, name="has space"), "spec.name"),
    ],
)
def test_malformed_specs_are_rejected_naming_the_field(
    agent: AgentProcess, spec: server_pb2.ServerSpec, field: str
) -> None:
    stub = agent.stub()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(grpc.RpcError) as info:
        stub.StartServer(agent_pb2.StartServerRequest(spec=spec), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(info.value.details()).startswith(field)
    listed = stub.ListServers(
        agent_pb2.ListServersRequest(include_finished=True), timeout=5
    ).servers
    assert list(listed) == []
    agent_children = psutil.Process(agent.proc.pid).children()  # type: ignore[union-attr]
    assert (
        agent_children == []
        and {p.pid for p in psutil.Process().children(recursive=True)} >= before
    )


def test_the_controllers_start_run_waves_carry_the_token(token_agent: AgentProcess) -> None:
    """StartRun waves go through grpc.aio (tunelab.controller.aiocalls), apart from the sync
    client: the token must ride on each call there too, and errors keep their status codes."""
    waves = AioStartRuns(default_token=None, deadline=5.0)
    spec = run_pb2.RunSpec()  # no server: refused after auth, nothing starts
    try:
        wrong, right, default_used, nobody = waves.start_runs(
            [
                StartRunCall(token_agent.address, "not-the-token", "wave-1", spec),
                StartRunCall(token_agent.address, TOKEN, "wave-2", spec),
                StartRunCall(token_agent.address, None, "wave-3", spec),
                StartRunCall(f"127.0.0.1:{free_port()}", TOKEN, "wave-4", spec),
            ]
        )
        codes = []
        for future in (wrong, right, default_used, nobody):
            with pytest.raises(grpc.RpcError) as failed:
                future.result(10)
            codes.append(failed.value.code())
        assert codes == [
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.INVALID_ARGUMENT,  # past auth: the empty spec is what it refuses
            grpc.StatusCode.UNAUTHENTICATED,  # no token, no default
            grpc.StatusCode.UNAVAILABLE,
        ]
    finally:
        waves.close()
    with pytest.raises(RuntimeError, match="stopping"):
        waves.start_runs([StartRunCall(token_agent.address, TOKEN, "late", spec)])
