"""Unit: an explicit ``auto_port`` on a run's server replaces the port 0/1 sentinels, checked once
where the message enters (agent/wire.py); the domain spec checks its own values and imports no
wire code. Port 0 in a RunSpec from an older client, or in a run.json from before the field,
still means an auto port."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.record import RunSpec
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.wire import run_spec_from_pb, spec_from_pb, spec_to_pb
from tunelab.common.specbounds import SpecViolation, check_server_spec
from tunelab.v1 import run_pb2, server_pb2

SPEC_MODULE = Path(__file__).resolve().parents[3] / "agent/tunelab/agent/servers/spec.py"


def run(port: int, auto_port: bool) -> run_pb2.RunSpec:
    server = server_pb2.ServerSpec(argv=["srv", "--port", "{port}"], port=port, auto_port=auto_port)
    command = run_pb2.CommandBenchmark(argv=["bench"], result_file="out.json")
    return run_pb2.RunSpec(server=server, benchmark=run_pb2.BenchmarkSpec(command=command))


@pytest.mark.parametrize("auto_port", [True, False])
def test_a_runs_server_with_auto_port_or_an_old_clients_port_0_is_an_auto_port(
    auto_port: bool,
) -> None:
    spec = run_spec_from_pb(run(0, auto_port))
    assert spec.server is not None and spec.server.auto_port and spec.server.port == 0
    assert spec_to_pb(spec.server).auto_port  # and it goes back out as the explicit field


def test_auto_port_with_a_port_is_refused_naming_the_port() -> None:
    with pytest.raises(InvalidSpec) as caught:
        run_spec_from_pb(run(8000, True))
    assert caught.value.field == "spec.port"  # a run's server fields are named as a server's


def test_a_plain_server_cannot_ask_for_an_auto_port_and_port_0_stays_invalid() -> None:
    with pytest.raises(SpecViolation, match="only a run's server") as caught:
        check_server_spec(server_pb2.ServerSpec(argv=["srv"], auto_port=True))
    assert caught.value.field == "spec.auto_port"
    with pytest.raises(InvalidSpec, match="expected 1-65535"):
        spec_from_pb(server_pb2.ServerSpec(argv=["srv"], port=0)).validated()


def test_the_domain_spec_checks_its_own_values_and_imports_no_wire_code() -> None:
    ServerSpec(argv=("srv",), port=0, auto_port=True).validated()
    with pytest.raises(InvalidSpec, match="must be 0 with auto_port"):
        ServerSpec(argv=("srv",), port=8000, auto_port=True).validated()
    imported = {
        node.module
        for node in ast.walk(ast.parse(SPEC_MODULE.read_text()))
        if isinstance(node, ast.ImportFrom)
    }
    assert not any(name and name.endswith(".wire") for name in imported)
    assert "tunelab.v1" not in imported


def test_a_run_file_from_before_the_field_reads_port_0_as_auto() -> None:
    old = ServerSpec(argv=("srv",), port=0).to_dict()
    del old["auto_port"]
    command = {"argv": ["bench"], "result_file": "out.json"}
    spec = RunSpec.from_dict({"server": old, "command": command, "max_duration": 0})
    assert spec.server is not None and spec.server.auto_port
