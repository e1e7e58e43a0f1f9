"""The three audit interfaces as real processes: tunelab-agent audit, RunAudit over gRPC on
loopback, and tunelab audit --agent, which must print and exit exactly like the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.fixtures.audit import scenarios
from tests.fixtures.audit.hostbuilder import H200_ROOT
from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tunelab.agent.audit.capture import make_nodes, materialize
from tunelab.v1 import agent_pb2

REPO = Path(__file__).resolve().parents[2]
NVML = H200_ROOT.parent / "nvml.json"


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod of /dev/nvidia* fixture nodes needs root")


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def agent_audit(*argv: str) -> subprocess.CompletedProcess[str]:
    return run("-m", "tunelab.agent", "audit", *argv)


def laptop_audit(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run("-m", "tunelab.cli", "audit", *argv, env=env)


def without_time(text: str) -> str:
    return "\n".join(
        line for line in text.splitlines() if "generated_at" not in line and " UTC" not in line
    )


@pytest.fixture
def untuned_root(tmp_path: Path) -> Path:
    scenarios.badly_tuned(tmp_path / "untuned")
    return tmp_path / "untuned"


@pytest.fixture
def untuned_agent(tmp_path: Path, untuned_root: Path) -> Iterator[AgentProcess]:
    proc = AgentProcess(tmp_path / "agent", ["--sysfs-root", str(untuned_root)]).start()
    try:
        yield proc
    finally:
        proc.terminate()


def test_unknown_check_id_is_a_usage_error_with_the_id_it_was_likely_meant_to_be() -> None:
    result = agent_audit("--only", "cpu.governor,cpu.nonsense")
    assert result.returncode == 2
    assert "unknown check id cpu.nonsense" in result.stderr and "--list" in result.stderr
    typo = agent_audit("--only", "cpu.govener")
    assert typo.returncode == 2
    assert "unknown check id cpu.govener, did you mean cpu.governor?" in typo.stderr
    assert max(map(len, typo.stderr.splitlines())) <= 100  # not the 28 ids on one line


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    result = agent_audit("--root", str(tmp_path / "nope"))
    assert result.returncode == 2 and "not a directory" in result.stderr


def test_host_cli_exit_codes_json_and_fix_script(untuned_root: Path, tmp_path: Path) -> None:
    table = agent_audit("--root", str(untuned_root))
    assert table.returncode == 1
    assert "FAIL  cpu.governor" in table.stdout and "powersave on 8-15" in table.stdout
    as_json = agent_audit("--root", str(untuned_root), "--json")
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["environment"] == "bare_metal"
    assert {"id", "status", "title", "observed", "expected", "evidence", "remediation"} <= set(
        report["checks"][0]
    )
    script = agent_audit("--root", str(untuned_root), "--fix-script")
    assert "CAP_EXP+8.w=5000:7000" in script.stdout
    healthy = tmp_path / "healthy"
    scenarios.healthy_bare_metal(healthy)
    assert agent_audit("--root", str(healthy)).returncode == 0
    old = tmp_path / "old.json"
    old.write_text(agent_audit("--root", str(healthy), "--json").stdout)
    diff = agent_audit("--root", str(untuned_root), "--compare", str(old))
    assert diff.returncode == 1
    assert "cpu.governor" in diff.stdout and "PASS -> FAIL" in diff.stdout


def test_run_audit_rpc_returns_the_report_and_rejects_unknown_ids(
    untuned_agent: AgentProcess,
) -> None:
    stub = untuned_agent.stub()
    reply = stub.RunAudit(
        agent_pb2.RunAuditRequest(only=["cpu.governor", "pcie.link_width"]), timeout=30
    )
    document = json.loads(reply.report.report_json)
    assert [c["id"] for c in document["checks"]] == ["cpu.governor", "pcie.link_width"]
    assert [c.status for c in reply.report.checks] == [3, 3]  # CHECK_STATUS_FAIL
    assert reply.report.environment == "bare_metal"
    with pytest.raises(grpc.RpcError) as caught:
        stub.RunAudit(agent_pb2.RunAuditRequest(only=["bogus.check"]), timeout=30)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "only: unknown check id bogus.check" in (caught.value.details() or "")


def test_laptop_prints_and_exits_like_the_host(
    untuned_agent: AgentProcess, untuned_root: Path
) -> None:
    remote = laptop_audit("--agent", untuned_agent.address, "--json")
    local = agent_audit("--root", str(untuned_root), "--json")
    assert remote.returncode == local.returncode == 1
    assert without_time(remote.stdout) == without_time(local.stdout)
    remote_table = laptop_audit("--agent", untuned_agent.address)
    local_table = agent_audit("--root", str(untuned_root))
    assert remote_table.returncode == 1
    assert without_time(remote_table.stdout) == without_time(local_table.stdout)
    unknown = laptop_audit("--agent", untuned_agent.address, "--only", "nope")
    assert unknown.returncode == 2 and "unknown check id nope" in unknown.stderr


@pytest.mark.usefixtures("as_root")
def test_agent_with_the_h200_capture_and_snapshot(tmp_path: Path) -> None:
    root = materialize(H200_ROOT, tmp_path / "h200")
    make_nodes(root)
    proc = AgentProcess(
        tmp_path / "agent", ["--sysfs-root", str(root), "--nvml-snapshot", str(NVML)]
    ).start()
    try:
        result = laptop_audit("--agent", proc.address, "--json")
    finally:
        proc.terminate()
    assert result.returncode == 0
    statuses = {c["id"]: c["status"] for c in json.loads(result.stdout)["checks"]}
    assert statuses["gpu.persistence"] == "PASS" and statuses["lxc.device_access"] == "PASS"


def test_laptop_exit_codes_for_connect_and_usage() -> None:
    unreachable = laptop_audit("--agent", f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 3 and "cannot reach" in unreachable.stderr
    # a named host goes through the controller: none is running at that address
    env_controller = {"TUNELAB_CONTROLLER": f"127.0.0.1:{free_port()}"}
    host = laptop_audit("gpu-node-1", env=env_controller)
    assert host.returncode == 3 and "cannot reach" in host.stderr
    both = laptop_audit("gpu-node-1", "--agent", "127.0.0.1:1")
    assert both.returncode == 2 and "not both" in both.stderr


def test_agent_audits_at_start_and_exports_the_result(tmp_path: Path, untuned_root: Path) -> None:
    import time
    import urllib.request

    port = free_port()
    proc = AgentProcess(
        tmp_path / "metrics-agent",
        ["--sysfs-root", str(untuned_root), "--metrics-listen", f"127.0.0.1:{port}"],
    ).start()
    try:
        wanted = 'tunelab_audit_check_status{check="cpu.governor",status="FAIL"} 1.0'
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline and wanted not in text:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                text = reply.read().decode()
            time.sleep(0.1)
        assert wanted in text  # the start-up audit ran without any RPC
        stub = proc.stub()
        stub.RunAudit(agent_pb2.RunAuditRequest(only=["mem.swap"]), timeout=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            after = reply.read().decode()
        assert wanted in after  # a partial run refreshes its check inside the full report
        assert 'tunelab_audit_check_status{check="mem.swap",status="PASS"} 1.0' in after
    finally:
        proc.terminate()
