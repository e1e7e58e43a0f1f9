"""Integration: experiment runs on the real agent daemon (no controller listening)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import grpc
import psutil
import pytest

from tests.support.agent_proc import AgentProcess
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2, server_pb2

R = run_pb2
SIM = [sys.executable, "-m", "tunelab.bench.simulator", "--port", "{port}", "--model", "sim"]


def run_spec(*sim_args: str, max_duration: float = 120, **bench: object) -> run_pb2.RunSpec:
    settings: dict[str, object] = {
        "model": "sim",
        "concurrency": [1],
        "requests": 4,
        "input_len": 8,
        "output_len": 8,
    }
    settings.update(bench)
    return R.RunSpec(
        server=server_pb2.ServerSpec(
            argv=[*SIM, *sim_args], port=0, ready_model="sim", stop_grace_seconds=5
        ),
        benchmark=R.BenchmarkSpec(builtin=R.BuiltinBenchmark(**settings)),  # type: ignore[arg-type]
        max_duration_seconds=max_duration,
        experiment="it",
    )


FINAL = {
    R.RUN_STATE_SUCCEEDED,
    R.RUN_STATE_FAILED_STARTUP,
    R.RUN_STATE_FAILED_BENCHMARK,
    R.RUN_STATE_CANCELLED,
    R.RUN_STATE_TIMED_OUT,
}


def wait_run(stub: agent_pb2_grpc.AgentStub, run_id: str, timeout: float = 60) -> run_pb2.Run:
    for update in stub.WatchRun(agent_pb2.WatchRunRequest(run_id=run_id), timeout=timeout):
        if update.run.state in FINAL:
            return update.run
    raise TimeoutError(run_id)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_run_starts_its_server_on_a_free_port_benchmarks_and_stops_it(
    agent: AgentProcess,
) -> None:
    stub = agent.stub()
    started = stub.StartRun(agent_pb2.StartRunRequest(run_id="r1", spec=run_spec()), timeout=10)
    assert started.created
    again = stub.StartRun(agent_pb2.StartRunRequest(run_id="r1", spec=run_spec()), timeout=10)
    assert not again.created and again.run.run_id == "r1"  # the same run, never a second one

    final = wait_run(stub, "r1")

    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    states = [R.RunState.Name(e.state) for e in final.events]
    expected = ["PENDING", "STARTING", "READY", "BENCHMARKING", "STOPPING", "SUCCEEDED"]
    assert states == [f"RUN_STATE_{s}" for s in expected]
    result = json.loads(final.result_json)
    assert result["points"][0]["completed"] == 4
    # the result was on disk before SUCCEEDED was reported
    assert json.loads((agent.state_dir / "runs" / "r1" / "result.json").read_text()) == result
    port = final.server.spec.port
    assert port > 0 and str(port) in final.server.spec.argv  # {port} filled in
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert port < ephemeral_low  # an auto port never comes from the ephemeral range
    assert final.server.state == server_pb2.SERVER_STATE_STOPPED and gone(final.server.pid)

    server_log = b"".join(
        c.data for c in stub.StreamLogs(agent_pb2.StreamLogsRequest(run_id="r1"), timeout=10)
    )
    assert b"Loading safetensors checkpoint shards" in server_log
    bench_log = stub.StreamLogs(
        agent_pb2.StreamLogsRequest(run_id="r1", stream="bench"), timeout=10
    )
    assert all(isinstance(c.data, bytes) for c in bench_log)
    listed = stub.ListRuns(agent_pb2.ListRunsRequest(include_finished=True), timeout=10)
    assert [r.run_id for r in listed.runs] == ["r1"] and listed.agent_instance_id


def test_max_duration_is_enforced_without_any_controller(agent: AgentProcess) -> None:
    stub = agent.stub()
    spec = run_spec("--itl-ms", "50", max_duration=4, requests=200, output_len=64)
    stub.StartRun(agent_pb2.StartRunRequest(run_id="slow", spec=spec), timeout=10)
    t0 = time.monotonic()
    final = wait_run(stub, "slow")
    assert final.state == R.RUN_STATE_TIMED_OUT
    assert "max_duration of 4 s" in final.message
    assert time.monotonic() - t0 < 30
    assert gone(final.server.pid)


def test_cancel_stops_the_benchmark_and_the_server(agent: AgentProcess) -> None:
    stub = agent.stub()
    stub.StartRun(
        agent_pb2.StartRunRequest(
            run_id="c1", spec=run_spec("--itl-ms", "50", requests=200, output_len=64)
        ),
        timeout=10,
    )
    for update in stub.WatchRun(agent_pb2.WatchRunRequest(run_id="c1"), timeout=60):
        if update.run.state == R.RUN_STATE_BENCHMARKING:
            break
    stub.CancelRun(agent_pb2.CancelRunRequest(run_id="c1"), timeout=10)
    final = wait_run(stub, "c1")
    assert final.state == R.RUN_STATE_CANCELLED and gone(final.server.pid)
    bench = json.loads((agent.state_dir / "runs" / "c1" / "bench-process.json").read_text())
    assert gone(int(bench[0]))


def test_a_command_benchmark_result_is_stored_as_is(agent: AgentProcess, tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, sys, urllib.request\n"
        "body = urllib.request.urlopen(sys.argv[1] + '/v1/models').read()\n"
        "model = json.loads(body)['data'][0]['id']\n"
        "json.dump({'tool': 'mine', 'models': model}, open('out.json', 'w'))\n"
    )
    spec = run_spec()
    spec.benchmark.CopyFrom(
        R.BenchmarkSpec(
            command=R.CommandBenchmark(
                argv=[sys.executable, str(script), "{url}"], result_file="out.json"
            )
        )
    )
    stub = agent.stub()
    stub.StartRun(agent_pb2.StartRunRequest(run_id="cmd", spec=spec), timeout=10)
    final = wait_run(stub, "cmd")
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    assert json.loads(final.result_json) == {"tool": "mine", "models": "sim"}


def test_a_result_file_planted_as_a_symlink_or_too_large_is_not_read(
    agent: AgentProcess, tmp_path: Path
) -> None:
    """The benchmark is the user's program: the root agent must not follow its result file to
    another file, nor read a result of any size into memory."""
    secret = tmp_path / "root-only.json"
    secret.write_text('{"stolen": "root secret"}')
    plants = {
        "link": f"import os; os.symlink({str(secret)!r}, 'out.json')\n",
        "huge": "open('out.json', 'w').write('[' + '0,' * (9 * 1024 * 1024) + '0]')\n",
    }
    stub = agent.stub()
    for name, body in plants.items():
        script = tmp_path / f"{name}.py"
        script.write_text(body)
        spec = run_spec()
        spec.benchmark.CopyFrom(
            R.BenchmarkSpec(
                command=R.CommandBenchmark(
                    argv=[sys.executable, str(script)], result_file="out.json"
                )
            )
        )
        stub.StartRun(agent_pb2.StartRunRequest(run_id=f"plant-{name}", spec=spec), timeout=10)
        final = wait_run(stub, f"plant-{name}")
        assert final.state == R.RUN_STATE_FAILED_BENCHMARK, (name, final.state, final.message)
        assert "root secret" not in final.message + final.result_json
        # a link is refused by the confinement check, and if swapped in after it, by O_NOFOLLOW
        expected = "out.json" if name == "link" else "larger than 16777216 bytes"
        assert expected in final.message, (name, final.message)


def test_a_server_that_never_gets_ready_fails_the_start(agent: AgentProcess) -> None:
    spec = run_spec()
    spec.server.argv[:] = [sys.executable, "-c", "raise SystemExit(4)"]
    stub = agent.stub()
    stub.StartRun(agent_pb2.StartRunRequest(run_id="bad", spec=spec), timeout=10)
    final = wait_run(stub, "bad")
    assert final.state == R.RUN_STATE_FAILED_STARTUP
    assert "exit code 4" in final.message


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s.benchmark.builtin.ClearField("concurrency"), "benchmark.concurrency"),
        (lambda s: s.benchmark.builtin.concurrency.append(0), "benchmark.concurrency[1]"),
        (lambda s: s.ClearField("benchmark"), "spec.benchmark"),
        (lambda s: s.server.env.update({"BAD-NAME": "1"}), "spec.env['BAD-NAME']"),
    ],
)
def test_bad_run_specs_are_rejected_naming_the_field(
    agent: AgentProcess, mutate: object, field: str
) -> None:
    spec = run_spec()
    mutate(spec)  # type: ignore[operator]
    with pytest.raises(grpc.RpcError) as info:
        agent.stub().StartRun(agent_pb2.StartRunRequest(run_id="x", spec=spec), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(info.value.details()).startswith(field), info.value.details()
    assert (
        list(
            agent.stub().ListRuns(agent_pb2.ListRunsRequest(include_finished=True), timeout=5).runs
        )
        == []
    )
