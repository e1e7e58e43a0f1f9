"""Unit: the attempt driver against a scripted agent — for answers a real agent here cannot be
made to give (a process that survives SIGKILL), and the transport-error rules."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import grpc
import pytest

from tunelab.controller.aiocalls import StartRunCall
from tunelab.controller.dispatch import AttemptDriver, DriverSettings
from tunelab.controller.runreport import RunReport
from tunelab.controller.runwire import run_report
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.spec import expand_text
from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store import ExperimentRow, HostRow, SqliteStore
from tunelab.controller.store.models import selector_key
from tunelab.v1 import run_pb2

SPEC = """
name: q
server: {command: [engine], flags: {--port: "{port}"}, ready: {model: m}}
benchmark: {concurrency: [1], requests: 1}
"""


class Unreachable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


class ScriptedAgent:
    """Answers StartRun/GetRun/CancelRun (the driver's RunCalls) with the run state a test
    sets, as the real client reports it (runwire.run_report); or raises UNAVAILABLE."""

    def __init__(self) -> None:
        self.state = run_pb2.RUN_STATE_STARTING
        self.kill_failed = False
        self.down = False
        self.starts = 0
        self.cancelled: list[str] = []

    def _run(self, run_id: str) -> RunReport:
        if self.down:
            raise Unreachable()
        return run_report(
            run_pb2.Run(
                run_id=run_id, state=self.state, kill_failed=self.kill_failed, message="scripted"
            )
        )

    def start_run(
        self, address: str, token: str | None, run_id: str, spec: run_pb2.RunSpec
    ) -> RunReport:
        self.starts += 1
        return self._run(run_id)

    def start_runs(self, calls: Sequence[StartRunCall]) -> list[Future[RunReport]]:
        answers: list[Future[RunReport]] = []
        for call in calls:
            answer: Future[RunReport] = Future()
            try:
                answer.set_result(self.start_run(call.address, call.token, call.run_id, call.spec))
            except Unreachable as exc:
                answer.set_exception(exc)
            answers.append(answer)
        return answers

    def get_run(self, address: str, token: str | None, run_id: str) -> RunReport:
        return self._run(run_id)

    def cancel_run(self, address: str, token: str | None, run_id: str) -> RunReport:
        self.cancelled.append(run_id)
        return self._run(run_id)


World = tuple[SqliteStore, ScriptedAgent, AttemptDriver, list[float]]


@pytest.fixture
def world(tmp_path: Path) -> World:
    store = SqliteStore(tmp_path / "c.db")
    added = store.add_host(HostRow(name="h1", address="h1:1"))
    store.transition_host("h1", added, HostState.READY)
    [e] = expand_text(SPEC)
    row = ExperimentRow("x1", "g", e.name, ExperimentState.QUEUED, e.spec)
    row.selector_key = selector_key(e.host)
    store.insert_experiments([row])
    agent = ScriptedAgent()
    clock = [1000.0]
    driver = AttemptDriver(
        store,
        agent,
        None,
        DriverSettings(unknown_after_failures=3, lease_timeout=60),
        clock=lambda: clock[0],
    )
    return store, agent, driver, clock


def dispatch(store: SqliteStore, driver: AttemptDriver) -> None:
    Scheduler(store).pass_once(created=driver.dispatch_new)  # each committed chunk, at once


def drive(store: SqliteStore, driver: AttemptDriver) -> None:
    hosts = {h.name: h for h in store.list_hosts()}
    for attempt in store.live_attempts():
        driver.drive(attempt, hosts.get(attempt.host))


def test_kill_failed_quarantines_the_host_until_a_person_lifts_it(world: World) -> None:
    store, agent, driver, _ = world
    dispatch(store, driver)
    agent.state, agent.kill_failed = run_pb2.RUN_STATE_CANCELLED, True
    drive(store, driver)
    host = store.get_host("h1")
    assert host is not None and host.state is HostState.QUARANTINED and host.quarantined
    assert "survived the stop ladder" in host.state_reason
    experiment = store.get_experiment("x1")
    assert experiment is not None and experiment.state is ExperimentState.CANCELLED


def test_unreachable_agent_is_unknown_then_lost_only_after_the_lease(world: World) -> None:
    store, agent, driver, clock = world
    dispatch(store, driver)
    agent.down = True
    for _ in range(25):  # 25 UNAVAILABLE in a row, well inside the lease
        drive(store, driver)
        clock[0] += 1.0
    [attempt] = store.live_attempts()
    assert attempt.state is AttemptState.UNKNOWN and attempt.prev_state is AttemptState.STARTING
    assert agent.starts == 1  # never relaunched
    clock[0] += 60.0
    drive(store, driver)
    assert store.attempts_for("x1")[0].state is AttemptState.LOST
    experiment = store.get_experiment("x1")
    assert experiment is not None and experiment.state is ExperimentState.QUEUED


def test_an_agent_that_answers_again_brings_the_attempt_back(world: World) -> None:
    store, agent, driver, _ = world
    dispatch(store, driver)
    agent.down = True
    for _ in range(4):
        drive(store, driver)
    agent.down, agent.state = False, run_pb2.RUN_STATE_BENCHMARKING
    drive(store, driver)
    [attempt] = store.live_attempts()
    assert attempt.state is AttemptState.BENCHMARKING and attempt.unknown_since is None


def test_a_run_still_going_after_its_attempt_was_lost_is_fenced_once(world: World) -> None:
    store, agent, driver, clock = world
    dispatch(store, driver)
    agent.down = True
    for _ in range(4):
        drive(store, driver)
        clock[0] += 1.0
    clock[0] += 60.0
    drive(store, driver)
    [lost] = store.attempts_for("x1")
    assert lost.state is AttemptState.LOST
    agent.down, agent.state = False, run_pb2.RUN_STATE_BENCHMARKING  # it was only hung
    host = store.get_host("h1")
    assert host is not None
    driver.fence(host, [lost.id, "a-persons-own-run"])
    driver.fence(host, [lost.id])  # the next poll still sees it: cancel again, no second event
    assert agent.cancelled == [lost.id, lost.id]
    fenced = [e for e in store.events_for("x1") if e["message"].startswith("fenced")]
    assert len(fenced) == 1 and "declared LOST" in fenced[0]["message"]
    assert store.attempts_for("x1")[0].result is None  # its result is never kept
