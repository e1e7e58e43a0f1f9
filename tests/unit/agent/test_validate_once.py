"""Unit: a StartRun's spec is checked once, where it enters (agent/wire.py). Before, its server's
values went through the same bounds five times (the message, the domain spec, the port fill,
the profiler flags, the registry); the shape (server xor server_id, one benchmark) was checked
again by the executor. Now the shape is the RunSpec's own invariant, the server's values are
checked by ``ServerSpec.validated()`` alone, and what the agent adds says why it stays valid."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import tunelab.agent.servers.spec as spec_module
import tunelab.common.specbounds as specbounds
from tunelab.agent.errors import InvalidSpec
from tunelab.agent.quarantine import QuarantineList
from tunelab.agent.recordbook import RecordBook
from tunelab.agent.runs.executor import _with_port
from tunelab.agent.runs.record import MAX_EVENTS, CommandBench, RunEvent, RunRecord, RunSpec
from tunelab.agent.runs.states import RunState, check_run_transition
from tunelab.agent.servers.spec import ServerSpec, ValidServerSpec
from tunelab.agent.statefile import write_json_atomic
from tunelab.agent.statewriter import DurableWriter
from tunelab.agent.wire import run_spec_from_pb
from tunelab.v1 import run_pb2, server_pb2

COMMAND = CommandBench(("bench",), "out.json")


def message(argv: list[str]) -> run_pb2.RunSpec:
    server = server_pb2.ServerSpec(argv=argv, auto_port=True, env={"URL": "http://h:{port}/"})
    command = run_pb2.CommandBenchmark(argv=["bench"], result_file="out.json")
    return run_pb2.RunSpec(server=server, benchmark=run_pb2.BenchmarkSpec(command=command))


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ...]]]:
    """Every check of a server's values, by the argv it was given (counted, then done)."""
    seen: list[tuple[str, ...]] = []
    real = specbounds.check_server_fields  # the one spec_module imported

    def counted(fields: specbounds.ServerFields, prefix: str = "spec.") -> None:
        seen.append(tuple(fields.argv))
        real(fields, prefix)

    monkeypatch.setattr(spec_module, "check_server_fields", counted)
    yield seen


def test_a_runs_server_is_checked_once_from_message_to_the_spec_the_registry_starts(
    checks: list[tuple[str, ...]],
) -> None:
    spec = run_spec_from_pb(message(["srv", "--port", "{port}"]))
    assert spec.server is not None
    started = _with_port(spec.server, 31234)
    assert started.argv == ("srv", "--port", "31234") and started.port == 31234
    assert started.env == {"URL": "http://h:31234/"} and not started.auto_port
    assert checks == [("srv", "--port", "{port}")]


def test_a_bad_server_value_is_still_refused_at_the_edge_naming_its_field(
    checks: list[tuple[str, ...]],
) -> None:
    with pytest.raises(InvalidSpec) as caught:
        run_spec_from_pb(message(["srv", "bad\0arg"]))
    assert caught.value.field == "spec.argv[1]"
    assert len(checks) == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"server": None, "server_id": ""}, "spec.server"),
        ({"server_id": "srv-1"}, "spec.server"),  # a server to start and one to use
        ({"command": None}, "spec.benchmark"),
        ({"builtin": {"concurrency": [1]}}, "spec.benchmark"),  # both kinds
        ({"max_duration": -1.0}, "spec.max_duration_seconds"),
        ({"max_duration": float("nan")}, "spec.max_duration_seconds"),
    ],
)
def test_a_run_spec_of_a_shape_the_agent_never_runs_cannot_be_built(
    fields: dict[str, object], field: str
) -> None:
    server = ServerSpec(argv=("srv",), port=0, auto_port=True).validated()
    values: dict[str, object] = {
        "server": server,
        "server_id": "",
        "builtin": None,
        "command": COMMAND,
        "max_duration": 0.0,
        **fields,
    }
    with pytest.raises(InvalidSpec) as caught:
        RunSpec(**values)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_the_port_fill_refuses_a_port_no_pool_gives() -> None:
    server = ServerSpec(argv=("srv",), port=0, auto_port=True).validated()
    for port in (0, 65536):
        with pytest.raises(ValueError, match="out of range"):
            _with_port(server, port)


def test_a_run_file_of_such_a_shape_is_quarantined_not_loaded(tmp_path: Path) -> None:
    good = RunSpec(ValidServerSpec(ServerSpec(("srv",), 0, auto_port=True)), "", None, COMMAND, 0)
    record = RunRecord(run_id="r1", spec=good, started_at=1.0).to_dict()
    record["spec"]["server_id"] = "srv-other"  # forged: a server to start and one to use
    path = tmp_path / "r1" / "run.json"
    path.parent.mkdir()
    write_json_atomic(path, record)
    writer = DurableWriter()
    quarantined = QuarantineList()
    book: RecordBook[RunRecord, RunState, RunEvent] = RecordBook(
        kind="run",
        id_field="run_id",
        path_of=lambda run_id: tmp_path / run_id / "run.json",
        check=check_run_transition,
        event=RunEvent,
        max_events=MAX_EVENTS,
        changed=threading.Condition(threading.RLock()),
        writer=writer,
        quarantined=quarantined,
    )
    try:
        assert book.load(path, RunRecord.from_dict, lambda r: r.run_id) is None
    finally:
        writer.close()
    assert not path.exists()
    (entry,) = quarantined.items()
    assert entry.kept_as is not None and entry.kept_as.exists()
    assert "spec.server: give a server to start or the server_id" in entry.reason


def test_redact_names_reach_the_spec_and_its_state_file_and_are_bounded() -> None:
    pb = message(["srv", "--seed", "x"])
    pb.server.redact.extend(["--seed", "MY_SEED"])
    spec = run_spec_from_pb(pb)
    assert spec.server is not None and spec.server.redact == ("--seed", "MY_SEED")
    assert ServerSpec.from_dict(spec.server.to_dict()).redact == ("--seed", "MY_SEED")
    pb.server.redact.extend(f"N{i}" for i in range(300))
    with pytest.raises(InvalidSpec) as caught:
        run_spec_from_pb(pb)
    assert caught.value.field == "spec.redact"
