"""Unit: the attempt driver against a scripted agent — for answers a real agent here cannot be
made to give (a process that survives SIGKILL), and the transport-error rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tunelab.controller.dispatch import AttemptDriver, DriverSettings
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.spec import expand_text
from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store import ExperimentRow, HostRow, SqliteStore
from tunelab.controller.store.models import selector_key
from tunelab.v1 import agent_pb2, run_pb2

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
    """Answers StartRun/GetRun with the run state a test sets; or raises UNAVAILABLE."""

    def __init__(self) -> None:
        self.state = run_pb2.RUN_STATE_STARTING
        self.kill_failed = False
        self.down = False
        self.starts = 0
        self.cancelled: list[str] = []

    def _run(self, run_id: str) -> run_pb2.Run:
        if self.down:
            raise Unreachable()
        return run_pb2.Run(
            run_id=run_id, state=self.state, kill_failed=self.kill_failed, message="scripted"
        )

    def get_info(self, address: str, token: str | None) -> agent_pb2.GetInfoResponse:
        return agent_pb2.GetInfoResponse(instance_id="i")

    def start_run(
        self, address: str, token: str | None, run_id: str, spec: run_pb2.RunSpec
    ) -> agent_pb2.StartRunResponse:
        self.starts += 1
        return agent_pb2.StartRunResponse(run=self._run(run_id))

    def get_run(self, address: str, token: str | None, run_id: str) -> run_pb2.Run:
        return self._run(run_id)

    def cancel_run(self, address: str, token: str | None, run_id: str) -> run_pb2.Run:
        self.cancelled.append(run_id)
        return self._run(run_id)

    def run_audit(
        self, address: str, token: str | None, only: list[str]
    ) -> agent_pb2.RunAuditResponse:
        raise NotImplementedError

    def stream_logs(
        self, address: str, token: str | None, request: agent_pb2.StreamLogsRequest
    ) -> Iterator[agent_pb2.StreamLogsResponse]:
        raise NotImplementedError


@pytest.fixture
def world(tmp_path: Path) -> tuple[SqliteStore, ScriptedAgent, AttemptDriver, list[float]]:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    store.transition_host("h1", store.get_host("h1"), HostState.READY)  # type: ignore[arg-type]
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
    scheduler = Scheduler(store)
    driver.dispatch_new(scheduler.pass_once(), scheduler.last_specs)


def drive(store: SqliteStore, driver: AttemptDriver) -> None:
    hosts = {h.name: h for h in store.list_hosts()}
    for attempt in store.live_attempts():
        driver.drive(attempt, hosts.get(attempt.host))


def test_kill_failed_quarantines_the_host_until_a_person_lifts_it(world: tuple) -> None:  # type: ignore[type-arg]
    store, agent, driver, _ = world
    dispatch(store, driver)
    agent.state, agent.kill_failed = run_pb2.RUN_STATE_CANCELLED, True
    drive(store, driver)
    host = store.get_host("h1")
    assert host is not None and host.state is HostState.QUARANTINED and host.quarantined
    assert "survived the stop ladder" in host.state_reason
    assert store.get_experiment("x1").state is ExperimentState.CANCELLED  # type: ignore[union-attr]


def test_unreachable_agent_is_unknown_then_lost_only_after_the_lease(world: tuple) -> None:  # type: ignore[type-arg]
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
    assert store.get_experiment("x1").state is ExperimentState.QUEUED  # type: ignore[union-attr]


def test_an_agent_that_answers_again_brings_the_attempt_back(world: tuple) -> None:  # type: ignore[type-arg]
    store, agent, driver, _ = world
    dispatch(store, driver)
    agent.down = True
    for _ in range(4):
        drive(store, driver)
    agent.down, agent.state = False, run_pb2.RUN_STATE_BENCHMARKING
    drive(store, driver)
    [attempt] = store.live_attempts()
    assert attempt.state is AttemptState.BENCHMARKING and attempt.unknown_since is None


def test_a_run_still_going_after_its_attempt_was_lost_is_fenced_once(world: tuple) -> None:  # type: ignore[type-arg]
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
