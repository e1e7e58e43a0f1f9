"""Integration, in a PID namespace of its own (``pidns``): a benchmark job runs under a monitor
exactly as a server does, so a helper that a command benchmark detaches with ``setsid -f`` is
stopped with it on CancelRun — also when the agent was killed and restarted in between.

Before the job ran under a monitor, the helper reparented to pid 1 and lived on while the run
was reported CANCELLED (issue 22). In the namespace, a regression can only leak a ``sleep``
into the namespace, which the kernel ends with the test.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.agent_proc import AgentProcess
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2, server_pb2

R = run_pb2
pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]

SIM = [sys.executable, "-m", "tunelab.bench.simulator", "--port", "{port}", "--model", "sim"]
HELPER_SECONDS = "123.25"  # marks the detached helper among the namespace's processes
ESCAPING = ["sh", "-c", f"setsid -f sleep {HELPER_SECONDS}; exec sleep 600"]


def escaping_run() -> run_pb2.RunSpec:
    return R.RunSpec(
        server=server_pb2.ServerSpec(argv=SIM, port=0, ready_model="sim", stop_grace_seconds=5),
        benchmark=R.BenchmarkSpec(
            command=R.CommandBenchmark(argv=ESCAPING, result_file="out.json")
        ),
        max_duration_seconds=300,
    )


def helpers() -> list[psutil.Process]:
    return [
        proc
        for proc in psutil.process_iter(["cmdline", "status"])
        if proc.info["cmdline"] == ["sleep", HELPER_SECONDS]
        and proc.info["status"] != psutil.STATUS_ZOMBIE
    ]


def wait_helper(timeout: float = 30.0) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while not (found := helpers()):
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's detached helper never started")
        time.sleep(0.05)
    assert len(found) == 1
    return found[0]


def wait_state(
    stub: agent_pb2_grpc.AgentStub, run_id: str, state: run_pb2.RunState.ValueType
) -> run_pb2.Run:
    for update in stub.WatchRun(agent_pb2.WatchRunRequest(run_id=run_id), timeout=90):
        if update.run.state == state:
            return update.run
    raise TimeoutError(f"{run_id} never reached {R.RunState.Name(state)}")


def test_cancel_stops_a_helper_the_command_benchmark_detached(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        stub.StartRun(agent_pb2.StartRunRequest(run_id="esc", spec=escaping_run()), timeout=10)
        helper = wait_helper()
        assert helper.ppid() != 1  # held in the monitor's tree, not reparented to init

        stub.CancelRun(agent_pb2.CancelRunRequest(run_id="esc"), timeout=10)
        final = wait_state(stub, "esc", R.RUN_STATE_CANCELLED)

        assert final.message == "cancelled on request"
        assert helpers() == [], "the detached helper outlived CancelRun"
    finally:
        agent.terminate()


def test_cancel_after_an_agent_restart_stops_the_detached_helper_too(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path / "agent").start()
    try:
        stub = agent.stub()
        stub.StartRun(agent_pb2.StartRunRequest(run_id="esc2", spec=escaping_run()), timeout=10)
        helper = wait_helper()
        agent.kill9()  # the benchmark and its monitor go on without an agent
        assert helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE

        agent.restart()
        stub = agent.stub()
        wait_state(stub, "esc2", R.RUN_STATE_BENCHMARKING)  # re-attached, still running
        stub.CancelRun(agent_pb2.CancelRunRequest(run_id="esc2"), timeout=10)
        wait_state(stub, "esc2", R.RUN_STATE_CANCELLED)

        assert helpers() == [], "the detached helper outlived CancelRun after a restart"
    finally:
        agent.terminate()
