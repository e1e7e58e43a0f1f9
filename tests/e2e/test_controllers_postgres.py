"""E2E: two controller processes on one real PostgreSQL database, two agents, a matrix of
experiments; kill -9 one controller mid-dispatch, then (after it is back) the other: every
experiment succeeds exactly once — one attempt each, one server started per experiment on the
agents — and both controllers answer reads and take submissions throughout."""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import grpc
import psycopg
import pytest
import yaml

from tests.e2e.conftest import Lab, sim_experiment
from tests.e2e.test_controller_e2e import servers_started, state
from tests.support.controller_proc import ControllerProcess
from tests.support.ports import free_port
from tests.support.postgres import PostgresServer
from tests.support.tcp_proxy import TcpProxy
from tunelab.controller.store.postgres import SCHEDULE_LOCK, PostgresStore
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


TURN_HOLDER = (
    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.granted"
)


def turn_holder(admin: psycopg.Connection[Any]) -> int | None:
    """The controller process (its pid, from its session's application_name) holding the
    scheduling turn now, or None."""
    row = admin.execute(TURN_HOLDER, (SCHEDULE_LOCK >> 32, SCHEDULE_LOCK & 0xFFFFFFFF)).fetchone()
    if row is None:
        return None
    name = str(row[0])  # "tunelab-controller pid=N turn"
    return int(name.split("pid=")[1].split()[0]) if "pid=" in name else None


def test_a_controller_frozen_while_it_holds_the_turn_loses_it_and_the_other_finishes(
    lab: Lab, postgres: PostgresServer
) -> None:
    """Issue 23 item 7: SIGSTOP the controller that holds the scheduling turn (its connection
    stays open, so a plain session lock would be held for ever). The other controller takes
    the turn once the frozen one's lease is over and runs every experiment; resumed, the
    frozen one double-books nothing."""
    url = postgres.new_database()
    controllers = [
        ControllerProcess(lab.root / f"controller-{i}", ["--db", url]).start() for i in (1, 2)
    ]
    frozen: ControllerProcess | None = None
    try:
        lab.controller = controllers[0]
        lab.add_agent("gpu-a")
        lab.add_agent("gpu-b")
        spec = sim_experiment(
            "freeze",
            itl_ms=10,
            benchmark={"concurrency": [1], "requests": 24, "input_len": 8, "output_len": 16},
            matrix={"server.flags.--tokens-per-chunk": [1, 2, 3, 4]},
        )
        reply = (
            controllers[1]
            .stub()
            .SubmitExperiments(
                X.SubmitExperimentsRequest(spec_yaml=yaml.safe_dump(spec), source="f.yaml"),
                timeout=30,
            )
        )
        ids = [e.id for e in reply.experiments]
        by_pid = {c.proc.pid: c for c in controllers if c.proc is not None}
        with psycopg.connect(url, autocommit=True) as admin:
            # catch one mid-tick: SIGSTOP it while it holds the turn. A turn lasts one pass
            # (milliseconds) per 0.2 s tick, so this is bounded by time, not by tries: on a
            # busy machine 500 tries once all missed.
            catch_by = time.monotonic() + 60
            while time.monotonic() < catch_by:
                holder = turn_holder(admin)
                if holder not in by_pid:
                    time.sleep(0.001)
                    continue
                victim = by_pid[holder]
                assert victim.proc is not None and victim.proc.poll() is None  # our own child
                victim.proc.send_signal(signal.SIGSTOP)
                if turn_holder(admin) == holder:
                    frozen = victim
                    break
                victim.proc.send_signal(signal.SIGCONT)  # it had let go already: again
            assert frozen is not None and frozen.proc is not None, "never caught a turn"
            frozen_at = time.monotonic()
            healthy = next(c for c in controllers if c is not frozen)
            assert healthy.proc is not None
            while turn_holder(admin) != healthy.proc.pid:
                assert time.monotonic() - frozen_at < 60, "the frozen controller kept the turn"
                time.sleep(0.05)
            print(f"turn passed {time.monotonic() - frozen_at:.1f} s after the freeze")
            wait_all_done(healthy, ids, 180)  # all of it while the other is still frozen
        frozen.proc.send_signal(signal.SIGCONT)
        time.sleep(2)  # its late writes, if any, meet the fence
        finals = [healthy.experiment(i) for i in ids]
        assert [state(e) for e in finals] == ["SUCCEEDED"] * 4, [e.message for e in finals]
        assert [len(e.attempts) for e in finals] == [1] * 4
        started = sum(servers_started(agent.log()) for agent in lab.agents.values())
        assert started == 4
        assert frozen.proc.poll() is None  # resumed, alive, and answering again
        assert [state(frozen.experiment(i)) for i in ids] == ["SUCCEEDED"] * 4
    finally:
        for controller in controllers:
            if controller.proc is not None and controller.proc.poll() is None:
                controller.proc.send_signal(signal.SIGCONT)
            controller.terminate()
