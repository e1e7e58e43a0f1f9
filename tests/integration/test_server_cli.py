"""Integration: ``tunelab server ...`` as a real process against a real agent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port
from tests.support.servers import FAKE_SERVER


def tunelab(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunelab.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_start_wait_json_then_ls_status_logs_stop(agent: AgentProcess) -> None:
    port = free_port()
    started = tunelab(
        "server",
        "start",
        "--agent",
        agent.address,
        "--name",
        "demo",
        "--port",
        str(port),
        "--env",
        "FOO=bar",
        "--grace",
        "5s",
        "--wait",
        "--json",
        "--",
        sys.executable,
        str(FAKE_SERVER),
        "--port",
        str(port),
        "--load-seconds",
        "0.5",
        "--shards",
        "5",
    )
    assert started.returncode == 0, started.stderr
    doc = json.loads(started.stdout)
    assert {"id", "state", "pid", "exit_code", "progress", "ready_seconds"} <= doc.keys()
    assert doc["state"] == "READY" and doc["pid"] > 0 and doc["exit_code"] is None
    assert doc["progress"]["done"] == doc["progress"]["total"] == 5
    assert 0.4 < doc["ready_seconds"] < 10

    listed = json.loads(tunelab("server", "ls", "--agent", agent.address, "--json").stdout)
    assert [s["name"] for s in listed] == ["demo"]
    table = tunelab("server", "ls", "--agent", agent.address).stdout
    assert "demo" in table and "READY" in table and "5/5" in table

    status = tunelab("server", "status", "--agent", agent.address, "demo", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["id"] == doc["id"]

    tail = tunelab("server", "logs", "--agent", agent.address, "demo", "--tail", "1")
    assert tail.returncode == 0 and tail.stdout == "model loaded\n"

    stopped = tunelab("server", "stop", "--agent", agent.address, "demo", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["state"] == "STOPPED"

    followed = tunelab("server", "logs", "--agent", agent.address, doc["id"], "-f")
    assert followed.returncode == 0 and "model loaded" in followed.stdout


def test_wait_on_a_crashing_server_exits_1_with_its_log_tail(agent: AgentProcess) -> None:
    port = free_port()
    result = tunelab(
        "server",
        "start",
        "--agent",
        agent.address,
        "--port",
        str(port),
        "--wait",
        "--",
        sys.executable,
        str(FAKE_SERVER),
        "--port",
        str(port),
        "--crash-at-shard",
        "2",
        "--exit-code",
        "9",
    )
    assert result.returncode == 1
    assert "FAILED" in result.stdout and "exit code 9" in result.stdout
    assert "shard 2 is corrupt" in result.stdout


def test_unreachable_agent_exits_3() -> None:
    result = tunelab("server", "ls", "--agent", f"127.0.0.1:{free_port()}", timeout=60)
    assert result.returncode == 3
    assert "cannot reach" in result.stderr


def test_missing_token_exits_3_and_token_env_works(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-123")
    agent = AgentProcess(
        tmp_path / "agent", ["--token-file", str(token_file)], token="tok-123"
    ).start()
    try:
        refused = tunelab("server", "ls", "--agent", agent.address)
        assert refused.returncode == 3 and "TUNELAB_TOKEN" in refused.stderr
        env = {"TUNELAB_TOKEN": "tok-123", "PATH": "/usr/bin:/bin"}
        ok = tunelab("server", "ls", "--agent", agent.address, "--json", env=env)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout) == []
        by_file = tunelab("server", "ls", "--agent", agent.address, "--token-file", str(token_file))
        assert by_file.returncode == 0
    finally:
        agent.terminate()


@pytest.mark.parametrize(
    "args",
    [
        ["server", "start", "--port", "8000"],  # no argv after --
        ["server", "start", "--port", "8000", "--env", "NOEQUALS", "--", "true"],
        ["server", "start", "--port", "8000", "--startup-timeout", "soon", "--", "true"],
        ["server", "frobnicate"],
    ],
)
def test_usage_errors_exit_2(agent: AgentProcess, args: list[str]) -> None:
    result = tunelab(*args, "--agent", agent.address) if args[1] != "frobnicate" else tunelab(*args)
    assert result.returncode == 2, result.stderr


def test_bad_spec_from_the_agent_exits_2_naming_the_field(agent: AgentProcess) -> None:
    result = tunelab("server", "start", "--agent", agent.address, "--port", "99999", "--", "true")
    assert result.returncode == 2
    assert "spec.port" in result.stderr
