"""Unit: the supervisor's progress reading against the real server state table. Log lines that
arrive between a pass's first read and its 2xx probe are read again on READY; that second read
must see the LOADING the first one wrote (a stale STARTING made it LOADING -> LOADING, which
crashed the watch thread and left a live server unwatched: no READY, no timeout, no stop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from tunelab.agent.gpu import NoGpuBackend
from tunelab.agent.procs.monitorclient import MonitorClient
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.servers.states import ServerState, check_transition
from tunelab.agent.servers.supervisor import ServerSupervisor, SupervisorSettings

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "engines" / "vllm-0.32-cpu-start.log"


class Keeper:
    """The registry's side, with its transition table: every change goes through it."""

    def __init__(self, record: ServerRecord) -> None:
        self.record = record

    def transition(self, server_id: str, target: ServerState, message: str, **updates: Any) -> None:
        check_transition(self.record.state, target)
        for key, value in updates.items():
            setattr(self.record, key, value)
        self.record.state = target
        self.record.message = message

    def update(self, server_id: str, *, persist: bool = False, **updates: Any) -> None:
        for key, value in updates.items():
            setattr(self.record, key, value)

    def view(self, server_id: str) -> ServerRecord:
        return self.record.snapshot()

    def state_of(self, server_id: str) -> ServerState:
        return self.record.state


def state_of(keeper: Keeper) -> ServerState:
    """The record's state as of now (read afresh after each pass)."""
    return keeper.record.state


def test_lines_read_again_on_ready_after_this_pass_wrote_loading(tmp_path: Path) -> None:
    lines = LOG.read_bytes().splitlines(keepends=True)
    log_path = tmp_path / "server.log"
    spec = ServerSpec(argv=("vllm", "serve"), port=8000, engine="vllm")
    record = ServerRecord(id="srv-1", spec=spec, state=ServerState.STARTING, started_at=1.0)
    keeper = Keeper(record)
    supervisor = ServerSupervisor(
        keeper,
        record.snapshot(),
        log_path,
        NoGpuBackend(),
        SupervisorSettings(),
        MonitorClient(tmp_path),
    )
    cut = next(i for i, line in enumerate(lines) if b"Starting to load model" in line) + 1
    log_path.write_bytes(b"".join(lines[:cut]))
    supervisor._read_progress()
    assert state_of(keeper) is ServerState.LOADING
    with log_path.open("ab") as f:  # more loading lines, then the probe answers 2xx
        f.write(b"".join(lines[cut:]))
    supervisor._on_ready()  # it reads the state afresh: no view from before the pass
    assert state_of(keeper) is ServerState.READY
    assert keeper.record.engine.phases, "the lines read on READY still count"


class FlakyKeeper(Keeper):
    """Its first transition raises, as a bug in one pass would."""

    def __init__(self, record: ServerRecord) -> None:
        super().__init__(record)
        self.failures = 1

    def transition(self, server_id: str, target: ServerState, message: str, **updates: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("a bug in one pass")
        super().transition(server_id, target, message, **updates)


def test_a_pass_that_crashes_is_retried_and_the_server_stays_watched(tmp_path: Path) -> None:
    spec = ServerSpec(argv=("vllm", "serve"), port=8000, engine="vllm")
    record = ServerRecord(id="srv-2", spec=spec, state=ServerState.STARTING, started_at=1.0)
    keeper = FlakyKeeper(record)
    supervisor = ServerSupervisor(
        keeper, record.snapshot(), tmp_path / "server.log", NoGpuBackend(), SupervisorSettings(),
        MonitorClient(tmp_path),
    )  # fmt: skip
    # no leader and no monitor socket: each pass finds the monitor gone and fails the server
    with capture_logs() as logs:
        supervisor.start()
        supervisor.join(10)
    assert keeper.record.state is ServerState.FAILED
    assert "monitor vanished" in keeper.record.message
    assert [e["event"] for e in logs].count("supervisor_crashed") == 1
