"""E2E: the control plane under load and faults — real daemons, real agents (some of them
stand-ins that are hung or slow), SIGSTOP/SIGCONT, and still exactly one run per experiment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.conftest import Lab, sim_experiment
from tests.e2e.test_controller_e2e import attempt_state, state
from tests.support import servers
from tests.support.controller_proc import ControllerProcess
from tests.support.ports import free_port
from tunelab.controller.store import SqliteStore
from tunelab.v1 import agent_pb2, controller_pb2, run_pb2, server_pb2

X = controller_pb2
FAKE_AGENTS = Path(__file__).resolve().parents[1] / "support" / "fake_agents.py"
STREAMS = 200


def healthy(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=2
        )
    serving: bool = reply.status == health_pb2.HealthCheckResponse.SERVING
    return serving


def open_streams(start: Any, count: int) -> list[Any]:
    """``count`` streams, each known to be running on the server (its first message read)."""
    streams = []
    deadline = time.monotonic() + 20
    for _ in range(count):
        while True:
            call = start()
            try:
                next(call)
                break
            except grpc.RpcError as exc:
                # a stream the test opened before (a watch) frees its slot when its handler
                # notices the client left; on a loaded machine that can take a moment
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        streams.append(call)
    return streams


def assert_unary_and_health_answer(address: str, unary: Any) -> None:
    for _ in range(10):
        unary()  # each with a 2 s deadline: a starved pool would time out
    assert healthy(address)


def assert_capped(start: Any, variable: str) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        next(start())
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"limit {STREAMS}" in (refused.value.details() or "")
    assert variable in (refused.value.details() or "")


def test_200_follow_streams_on_each_daemon_never_starve_unary_calls_or_health(lab: Lab) -> None:
    cap = {"TUNELAB_CONTROLLER_MAX_STREAMS": str(STREAMS)}
    controller = lab.start_controller(**cap)
    agent = lab.add_agent("gpu-a", env={"TUNELAB_AGENT_MAX_STREAMS": str(STREAMS)})
    agent_stub = agent.stub()
    server = servers.start(agent_stub, servers.fake_spec(free_port(), "--load-seconds", "0.1"))
    servers.watch_until(agent_stub, server.id, [server_pb2.SERVER_STATE_READY])

    def follow() -> Any:
        request = agent_pb2.StreamLogsRequest(server_id=server.id, follow=True)
        return agent_stub.StreamLogs(request)

    streams = open_streams(follow, STREAMS)
    assert_unary_and_health_answer(
        agent.address, lambda: agent_stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=2)
    )
    assert_capped(follow, "TUNELAB_AGENT_MAX_STREAMS")
    streams.pop().cancel()  # a closed stream gives its slot back
    deadline = time.monotonic() + 10
    while True:
        try:
            streams.append(open_streams(follow, 1)[0])
            break
        except grpc.RpcError:
            assert time.monotonic() < deadline, "a cancelled stream never gave its slot back"
            time.sleep(0.1)

    # the controller: 200 `submit --wait` watchers on an experiment that waits for a host
    spec = sim_experiment("waits", host={"labels": {"pool": "nowhere"}})
    [queued] = lab.submit(spec)
    stub = controller.stub()

    def watch() -> Any:
        return stub.WatchExperiment(X.WatchExperimentRequest(ids=[queued["id"]]))

    watchers = open_streams(watch, STREAMS)
    assert_unary_and_health_answer(
        controller.address, lambda: stub.ListHosts(X.ListHostsRequest(), timeout=2)
    )
    assert_capped(watch, "TUNELAB_CONTROLLER_MAX_STREAMS")
    for call in streams + watchers:
        call.cancel()


class FakeFleet:
    """Stand-in agents in a child process (tests/support/fake_agents.py)."""

    def __init__(self, count: int, slow: int, starts: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE_AGENTS), "--count", str(count), "--slow", str(slow),
             "--starts", str(starts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.ports = [int(self.proc.stdout.readline()) for _ in range(count + slow)]

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # our own child, maybe stopped by the test
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def fleets(tmp_path: Path) -> Iterator[list[FakeFleet]]:
    started: list[FakeFleet] = []
    try:
        yield started
    finally:
        for fleet in started:
            fleet.close()


def scale_spec(name: str, pool: str, repeat: int = 1) -> str:
    return yaml.safe_dump(
        {
            "name": name,
            "host": {"labels": {"pool": pool}},
            "server": {"command": ["engine", "--port", "{port}"], "ready": {"model": "m"}},
            "benchmark": {"concurrency": [1], "requests": 1},
            "repeat": repeat,
        }
    )


def test_a_stopped_and_a_slow_agent_hold_up_only_themselves(
    tmp_path: Path, fleets: list[FakeFleet]
) -> None:
    starts = tmp_path / "starts.txt"
    healthy_fleet = FakeFleet(4, 1, starts)  # 4 instant agents, 1 answering at its deadline
    stopped_fleet = FakeFleet(1, 0, starts)  # SIGSTOPped below: connects, never answers
    fleets += [healthy_fleet, stopped_fleet]
    controller = ControllerProcess(tmp_path / "controller").start()
    try:
        stub = controller.stub()
        *ok_ports, slow_port = healthy_fleet.ports
        hosts = [("a-slow", slow_port, "hung"), ("a-stopped", stopped_fleet.ports[0], "hung")]
        hosts += [(f"ok{i}", port, "ok") for i, port in enumerate(ok_ports)]
        for name, port, pool in hosts:
            stub.AddHost(
                X.AddHostRequest(name=name, address=f"127.0.0.1:{port}", labels={"pool": pool}),
                timeout=10,
            )
        deadline = time.monotonic() + 20
        while {h.name for h in stub.ListHosts(X.ListHostsRequest(), timeout=5).hosts
               if h.state == X.HOST_STATE_READY} < {"a-slow", "a-stopped", "ok0"}:  # fmt: skip
            assert time.monotonic() < deadline, "hosts never became READY"
            time.sleep(0.1)
        os.kill(stopped_fleet.proc.pid, signal.SIGSTOP)  # our own child
        # give both bad hosts work: a StartRun each that will wait on its deadline
        hung_spec = scale_spec("hung", "hung", 2)
        stub.SubmitExperiments(X.SubmitExperimentsRequest(spec_yaml=hung_spec), timeout=10)
        time.sleep(1.0)  # the slow and stopped hosts now each hold calls in flight

        submitted = stub.SubmitExperiments(
            X.SubmitExperimentsRequest(spec_yaml=scale_spec("healthy", "ok", 8)), timeout=10
        ).experiments
        ids = [e.id for e in submitted]
        deadline = time.monotonic() + 30
        while not all(state(controller.experiment(i)) == "SUCCEEDED" for i in ids):
            assert time.monotonic() < deadline, controller.log()[-3000:]
            time.sleep(0.1)

        store = SqliteStore(controller.db)
        try:
            submitted_at = {e.id: e.submitted_at for e in submitted}
            arrivals = {
                run: float(at)
                for run, at in (line.split() for line in starts.read_text().splitlines())
            }
            for experiment_id in ids:
                [attempt] = store.attempts_for(experiment_id)
                # a regression that waits on the hung hosts' 3 s / 10 s deadlines shows here
                wait = arrivals[attempt.id] - submitted_at[experiment_id]
                assert wait < 2.0, (experiment_id, wait)
        finally:
            store.close()
        hung = [e for e in stub.ListExperiments(X.ListExperimentsRequest(), timeout=5).experiments
                if e.name.startswith("hung")]  # fmt: skip
        assert len(hung) == 2 and all(state(e) in ("QUEUED", "RUNNING") for e in hung)  # not failed
    finally:
        controller.terminate()  # it outlived the test before


def test_sigstop_lost_retry_sigcont_cancels_the_stale_run_and_keeps_one_result(lab: Lab) -> None:
    controller = lab.start_controller(
        TUNELAB_CONTROLLER_LEASE_TIMEOUT="2s",
        TUNELAB_CONTROLLER_UNKNOWN_AFTER_FAILURES="2",
        TUNELAB_CONTROLLER_AGENT_CALL_TIMEOUT="0.5s",
        TUNELAB_CONTROLLER_AGENT_START_TIMEOUT="2s",
    )
    lab.add_agent("gpu-a")
    lab.add_agent("gpu-b")
    [submitted] = lab.submit(
        sim_experiment(
            "fenced",
            itl_ms=25,
            benchmark={"concurrency": [1], "requests": 24, "input_len": 8, "output_len": 16},
        )
    )
    running = controller.wait_for(
        submitted["id"],
        lambda e: bool(e.attempts) and attempt_state(e.attempts[0]) == "BENCHMARKING",
    )
    first = running.attempts[0]
    stopped = lab.agents[first.host]
    assert stopped.proc is not None
    os.kill(stopped.proc.pid, signal.SIGSTOP)  # our own child, started by this lab
    try:
        controller.wait_for(submitted["id"], lambda e: attempt_state(e.attempts[0]) == "LOST", 30)
    finally:
        os.kill(stopped.proc.pid, signal.SIGCONT)

    stale_run = stopped.stub().GetRun
    deadline = time.monotonic() + 30
    while True:
        run = stale_run(agent_pb2.GetRunRequest(run_id=first.id), timeout=5).run
        if run.state == run_pb2.RUN_STATE_CANCELLED:
            break
        assert time.monotonic() < deadline, f"the stale run was never cancelled: {run}"
        time.sleep(0.2)
    final = controller.wait_for(submitted["id"], lambda e: state(e) in ("SUCCEEDED", "FAILED"), 90)
    assert state(final) == "SUCCEEDED"
    assert [attempt_state(a) for a in final.attempts] == ["LOST", "SUCCEEDED"]
    assert final.attempts[1].host != first.host
    assert [bool(a.result_json) for a in final.attempts] == [False, True]  # one result
    store = SqliteStore(controller.db)
    try:
        fenced = [e for e in store.events_for(submitted["id"]) if e["message"].startswith("fenced")]
    finally:
        store.close()
    assert len(fenced) == 1 and fenced[0]["ref"] == first.id
    assert "declared LOST" in fenced[0]["message"]
