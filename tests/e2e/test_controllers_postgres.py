"""E2E: two controller processes on one real PostgreSQL database, two agents, a matrix of
experiments; kill -9 one controller mid-dispatch, then (after it is back) the other: every
experiment succeeds exactly once — one attempt each, one server started per experiment on the
agents — and both controllers answer reads and take submissions throughout."""

from __future__ import annotations

import time
from collections import Counter

import grpc
import pytest
import yaml

from tests.e2e.conftest import Lab, sim_experiment
from tests.e2e.test_controller_e2e import servers_started, state
from tests.support.controller_proc import ControllerProcess
from tests.support.ports import free_port
from tests.support.postgres import PostgresServer
from tests.support.tcp_proxy import TcpProxy
from tunelab.controller.store.postgres import PostgresStore
from tunelab.v1 import controller_pb2

X = controller_pb2


def running_count(controller: ControllerProcess) -> int:
    listed = controller.stub().ListExperiments(X.ListExperimentsRequest(), timeout=10)
    return sum(state(e) == "RUNNING" for e in listed.experiments)


def wait_all_done(controller: ControllerProcess, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [state(controller.experiment(i)) for i in ids]
        if all(s in ("SUCCEEDED", "FAILED", "CANCELLED") for s in states):
            return
        time.sleep(0.2)
    raise TimeoutError(f"not done: {Counter(states)}\n{controller.log()[-3000:]}")


def test_two_controllers_one_database_kill_9_each_every_experiment_once(
    lab: Lab, postgres: PostgresServer
) -> None:
    url = postgres.new_database()
    controllers = [
        ControllerProcess(lab.root / f"controller-{i}", ["--db", url]).start() for i in (1, 2)
    ]
    try:
        lab.controller = controllers[0]  # hosts added through the first, seen by both
        lab.add_agent("gpu-a")
        lab.add_agent("gpu-b")
        spec = sim_experiment(
            "duo",
            itl_ms=10,
            benchmark={"concurrency": [1], "requests": 6, "input_len": 8, "output_len": 16},
            matrix={"server.flags.--tokens-per-chunk": [1, 2, 3, 4, 5, 6]},
        )
        text = yaml.safe_dump(spec, sort_keys=False)
        reply = (
            controllers[1]
            .stub()
            .SubmitExperiments(  # submitted through the second
                X.SubmitExperimentsRequest(spec_yaml=text, source="duo.yaml"), timeout=30
            )
        )
        ids = [e.id for e in reply.experiments]
        assert len(ids) == 6

        for victim in (0, 1):  # kill -9 one mid-dispatch, bring it back, then the other
            deadline = time.monotonic() + 60
            while running_count(controllers[1 - victim]) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            controllers[victim].kill9()
            time.sleep(0.5)
            controllers[victim].start()

        wait_all_done(controllers[0], ids, 180)
        finals = [controllers[1].experiment(i) for i in ids]  # either controller answers
        assert [state(e) for e in finals] == ["SUCCEEDED"] * 6, [e.message for e in finals]
        assert [len(e.attempts) for e in finals] == [1] * 6
        started = sum(servers_started(agent.log()) for agent in lab.agents.values())
        assert started == 6  # one server per experiment across both agents: no duplicate run
        store = PostgresStore(url)
        per_experiment = Counter(r["experiment_id"] for r in store._query("SELECT * FROM attempts"))
        assert per_experiment == Counter(dict.fromkeys(ids, 1))
    finally:
        for controller in controllers:
            controller.terminate()


def test_a_controller_cut_off_from_the_database_stops_and_says_so(
    lab: Lab, postgres: PostgresServer
) -> None:
    url = postgres.new_database()
    proxy = TcpProxy(postgres.port, free_port())
    cut_off = ControllerProcess(
        lab.root / "controller-cut", ["--db", url.replace(f":{postgres.port}/", f":{proxy.port}/")]
    ).start()
    other: ControllerProcess | None = None
    try:
        lab.controller = cut_off
        lab.add_agent("gpu-a")
        spec = sim_experiment(
            "cut",
            itl_ms=10,
            benchmark={"concurrency": [1], "requests": 6, "input_len": 8, "output_len": 16},
            repeat=3,
        )
        reply = cut_off.stub().SubmitExperiments(
            X.SubmitExperimentsRequest(spec_yaml=yaml.safe_dump(spec), source="cut.yaml"),
            timeout=30,
        )
        ids = [e.id for e in reply.experiments]
        deadline = time.monotonic() + 60
        while running_count(cut_off) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the first controller holds the turn and dispatched one
        other = ControllerProcess(lab.root / "controller-other", ["--db", url]).start()
        proxy.cut()  # its sessions die: the lock is released, the other takes the turn
        with pytest.raises(grpc.RpcError) as info:
            cut_off.stub().SubmitExperiments(
                X.SubmitExperimentsRequest(spec_yaml=yaml.safe_dump(spec)), timeout=30
            )
        assert "cannot reach the database postgresql://" in (info.value.details() or "")
        wait_all_done(other, ids, 120)
        finals = [other.experiment(i) for i in ids]
        assert [state(e) for e in finals] == ["SUCCEEDED"] * 3
        assert [len(e.attempts) for e in finals] == [1] * 3
        assert servers_started(lab.agents["gpu-a"].log()) == 3
        # it says why, once its pool has given up on the connection it lost (10 s)
        deadline = time.monotonic() + 30
        while "cannot reach the database" not in cut_off.log_path.read_text():
            assert time.monotonic() < deadline, cut_off.log()[-3000:]
            time.sleep(0.2)
    finally:
        proxy.close()
        cut_off.terminate()
        if other is not None:
            other.terminate()
