"""Integration: each server under its own monitor process — escapes stay in its tree, a kill -9 of
the agent at any step of StartServer loses nothing and never starts a second copy, the exit
code of a server that dies while no agent runs is kept, one agent per state dir, and request
paths stay inside their folders. Real agent, real monitors, real children."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import (
    fake_spec,
    get,
    gone,
    reported_process,
    start,
    wait_state,
    watch_until,
)
from tunelab.agent.servers.registry import FAILPOINT_ENV
from tunelab.v1 import agent_pb2, run_pb2, server_pb2

S = server_pb2


@pytest.mark.parametrize("escape", ["setsid-env-i", "unset-marker"])
def test_an_escaped_grandchild_stays_in_the_monitors_tree_and_dies_with_the_stop(
    agent: AgentProcess, escape: str
) -> None:
    stub = agent.stub()
    spec = fake_spec(free_port(), "--load-seconds", "0.1", "--escape", escape, stop_grace_seconds=1)
    server = start(stub, spec)
    watch_until(stub, server.id, [S.SERVER_STATE_READY])
    escaped = reported_process(stub, server.id, "escaped")
    monitor = psutil.Process(server.pid).parent()
    assert monitor is not None and "tunelab.agent.procs.monitor" in monitor.cmdline()
    assert escaped.ppid() == monitor.pid  # reparented to the subreaper, not to init
    assert "TUNELAB_SERVER_ID" not in escaped.environ()  # no marker left to find it by
    assert escaped.pid not in {c.pid for c in psutil.Process(server.pid).children(recursive=True)}

    stopped = stub.StopServer(agent_pb2.StopServerRequest(id=server.id), timeout=60).server

    assert stopped.state == S.SERVER_STATE_STOPPED and "SIGKILL" in stopped.message
    assert gone(server.pid) and gone(escaped.pid)
    assert escaped.pid in {p.pid for p in stopped.descendants}


def _copies(port: int) -> list[int]:
    """Live fake servers started for ``port`` (a second copy would be a second pid here)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if (
            proc.info["status"] != psutil.STATUS_ZOMBIE
            and any("lifecycle_server" in a for a in cmdline)
            and str(port) in cmdline
        ):
            found.append(proc.info["pid"])
    return found


@pytest.mark.parametrize("step", ["after-intent", "after-spawn", "after-record"])
def test_an_agent_killed_at_any_step_of_start_server_loses_nothing_and_never_starts_twice(
    tmp_path: Path, step: str
) -> None:
    agent = AgentProcess(tmp_path / "agent")
    agent.env[FAILPOINT_ENV] = step
    agent.start()
    port = free_port()
    spec = fake_spec(port, "--load-seconds", "0.1")
    try:
        with pytest.raises(grpc.RpcError):
            start(agent.stub(), spec, "crash")
        assert agent.proc is not None and agent.proc.wait(10) == -9
        agent.env.pop(FAILPOINT_ENV)
        agent.restart()
        stub = agent.stub()

        again = start(stub, spec, "crash")  # the caller retries the same id

        if step == "after-intent":  # the record was on disk, nothing had been spawned
            assert again.state == S.SERVER_STATE_FAILED and "nothing ran" in again.message
            assert _copies(port) == []
            return
        ready = wait_state(stub, "crash", S.SERVER_STATE_READY)
        assert _copies(port) == [ready.pid]  # the first attempt, found; no second copy
        stopped = stub.StopServer(agent_pb2.StopServerRequest(id="crash"), timeout=60).server
        assert stopped.state == S.SERVER_STATE_STOPPED and _copies(port) == []
    finally:
        agent.terminate()
        for pid in _copies(port):  # only on failure: never leave a stray server behind
            psutil.Process(pid).kill()


def _stranded_dying_server(
    agent: AgentProcess, server_id: str, die_after: float, exit_code: int
) -> psutil.Process:
    """A ready server that exits on its own ``die_after`` s later, and its agent kill -9'd
    before that: returns the server's monitor, left to finish on its own."""
    stub = agent.stub()
    spec = fake_spec(
        free_port(), "--load-seconds", "0.1",
        "--die-after-ready", str(die_after), "--exit-code", str(exit_code),
    )  # fmt: skip
    server = start(stub, spec, server_id)
    watch_until(stub, server_id, [S.SERVER_STATE_READY])
    agent.kill9()
    monitor = psutil.Process(server.pid).parent()
    assert monitor is not None
    return monitor


def test_the_exit_code_of_a_server_that_dies_while_no_agent_runs_is_kept(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        monitor = _stranded_dying_server(agent, "dies", die_after=1.0, exit_code=7)
        monitor.wait(20)  # the server exited, its monitor wrote the exit record and left

        agent.restart()
        final = get(agent.stub(), "dies")

        assert final.state == S.SERVER_STATE_FAILED
        assert final.exit_code == 7
        assert "while the agent was not running (exit code 7)" in final.message
    finally:
        agent.terminate()


@pytest.mark.pidns  # it kills an agent and strands a monitor: only in its own namespace
@pytest.mark.needs_root
def test_a_monitor_whose_folder_was_removed_still_exits_with_its_server(tmp_path: Path) -> None:
    """rm -rf of a state dir under a live server: once the server exits, its monitor cannot
    write the exit record anywhere; it must leave, not retry forever."""
    agent = AgentProcess(tmp_path / "agent").start()
    monitor: psutil.Process | None = None
    try:
        monitor = _stranded_dying_server(agent, "orphaned", die_after=1.5, exit_code=3)
        shutil.rmtree(tmp_path / "agent" / "servers" / "orphaned")
        monitor.wait(20)  # raises TimeoutExpired while it retries forever
    finally:
        agent.terminate()
        if monitor is not None and monitor.is_running():
            monitor.kill()  # the one this test started (the parent of its server)


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _file_says(server_dir: Path, state: str) -> None:
    """Wait for the record's file to hold ``state``: the record book writes it outside its lock,
    a moment after a watcher sees the change (process-model.md, "The record book")."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            written = json.loads((server_dir / "state.json").read_text())["state"]
        except (OSError, ValueError, KeyError):
            written = None
        if written == state and not list(server_dir.glob(".state.json.*")):
            return
        time.sleep(0.05)
    raise AssertionError(f"{server_dir}/state.json never said {state}")


def test_a_second_agent_on_the_same_state_dir_exits_2_naming_the_holder_and_changes_nothing(
    tmp_path: Path,
) -> None:
    first = AgentProcess(tmp_path / "agent").start()
    try:
        server = start(first.stub(), fake_spec(free_port(), "--load-seconds", "0.1"), "held")
        watch_until(first.stub(), "held", [S.SERVER_STATE_READY])
        _file_says(first.state_dir / "servers" / "held", "READY")
        before = _tree_digest(first.state_dir / "servers")
        second = AgentProcess(first.state_dir)

        result = subprocess.run(second.command(), capture_output=True, timeout=30)

        assert result.returncode == 2
        assert first.proc is not None and f"pid {first.proc.pid}" in result.stderr.decode()
        assert _tree_digest(first.state_dir / "servers") == before
        assert get(first.stub(), "held").state == S.SERVER_STATE_READY and not gone(server.pid)
        first.stub().StopServer(agent_pb2.StopServerRequest(id="held"), timeout=60)
    finally:
        first.terminate()


@pytest.mark.parametrize(
    "result_file", ["/tmp/canary-{n}", "../canary-{n}", "sub/../../canary-{n}", "..", ""]
)
def test_a_result_file_outside_the_run_folder_is_refused_naming_the_field(
    agent: AgentProcess, result_file: str
) -> None:
    canary_name = f"canary-{free_port()}"
    canaries = [Path("/tmp") / canary_name, agent.state_dir / "runs" / canary_name]
    for canary in canaries:
        canary.parent.mkdir(parents=True, exist_ok=True)
        canary.write_text("keep me")
    spec = run_pb2.RunSpec(
        server=server_pb2.ServerSpec(argv=[sys.executable, "-c", "pass"], port=0),
        benchmark=run_pb2.BenchmarkSpec(
            command=run_pb2.CommandBenchmark(
                argv=["true"], result_file=result_file.replace("canary-{n}", canary_name)
            )
        ),
    )
    try:
        with pytest.raises(grpc.RpcError) as refused:
            agent.stub().StartRun(agent_pb2.StartRunRequest(run_id="r", spec=spec), timeout=10)

        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "spec.benchmark.command.result_file" in str(refused.value.details())
        assert all(c.read_text() == "keep me" for c in canaries)
        assert not (agent.state_dir / "runs" / "r").exists()
    finally:
        for canary in canaries:
            canary.unlink(missing_ok=True)


def test_a_killed_monitor_makes_its_server_failed_and_its_verified_processes_killed(
    agent: AgentProcess,
) -> None:
    stub = agent.stub()
    server = start(stub, fake_spec(free_port(), "--load-seconds", "0.1"), "orphaned")
    watch_until(stub, "orphaned", [S.SERVER_STATE_READY])
    monitor = psutil.Process(server.pid).parent()
    assert monitor is not None and "tunelab.agent.procs.monitor" in monitor.cmdline()

    monitor.kill()  # someone SIGKILLs the monitor: the server is orphaned to init

    final = wait_state(stub, "orphaned", S.SERVER_STATE_FAILED, timeout=15)
    assert "monitor vanished" in final.message and str(server.pid) in final.message
    deadline = time.monotonic() + 5
    while not gone(server.pid):
        assert time.monotonic() < deadline, "the orphaned server was left running"
        time.sleep(0.05)
