"""Profiles through the real agent: the engine profile's flags, the window, the kept trace
fetched over FetchProfile, the cap, confinement of names, and the cache reset's dev mode.

The server is the simulator with vLLM's --profiler-config flag and endpoints (engine "vllm"),
so the agent adds exactly what it adds for a real vLLM."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import grpc
import pytest

from tests.integration.test_agent_runs import wait_run
from tests.support.agent_proc import AgentProcess
from tunelab.analysis.profiles.summary import summarize
from tunelab.v1 import agent_pb2, run_pb2, server_pb2

R = run_pb2
SIM = [sys.executable, "-m", "tunelab.bench.simulator", "--port", "{port}", "--model", "sim"]


def spec(*sim_args: str, profile: R.ProfileSpec | None = None, **bench: object) -> R.RunSpec:
    settings: dict[str, object] = {
        "model": "sim", "concurrency": [1, 2], "requests": 6, "input_len": 8, "output_len": 8,
    }  # fmt: skip
    settings.update(bench)
    builtin = R.BuiltinBenchmark(**settings)  # type: ignore[arg-type]
    if profile is not None:
        builtin.profile.CopyFrom(profile)
    return R.RunSpec(
        server=server_pb2.ServerSpec(
            argv=[*SIM, "--itl-ms", "2", *sim_args],
            port=0,
            ready_model="sim",
            stop_grace_seconds=5,
            engine="vllm",
        ),
        benchmark=R.BenchmarkSpec(builtin=builtin),
        max_duration_seconds=120,
    )


def fetch(
    agent: AgentProcess, run_id: str, name: str, offset: int = 0, max_bytes: int = 0
) -> bytes:
    request = agent_pb2.FetchProfileRequest(
        run_id=run_id, name=name, offset=offset, max_bytes=max_bytes
    )
    chunks = agent.stub().FetchProfile(request, timeout=30)
    return b"".join(c.data for c in chunks)


def test_a_profiled_run_keeps_its_trace_and_it_is_fetched_whole(
    agent: AgentProcess, tmp_path: Path
) -> None:
    stub = agent.stub()
    stub.StartRun(
        agent_pb2.StartRunRequest(
            run_id="p1", spec=spec(profile=R.ProfileSpec(point=1), reset_cache=False)
        ),
        timeout=10,
    )
    final = wait_run(stub, "p1")
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    argv = list(final.server.spec.argv)
    config = json.loads(argv[argv.index("--profiler-config") + 1])
    trace_dir = agent.state_dir / "runs" / "p1" / "traces"
    assert config["torch_profiler_dir"] == str(trace_dir) and config["profiler"] == "torch"
    assert "VLLM_SERVER_DEV_MODE" not in final.server.spec.env  # no reset: no dev mode
    result = json.loads(final.result_json)
    profile = result["profile"]
    assert profile["point"] == 1 and profile["window"]["ok"] is True
    assert profile["window"]["output_tokens"] == 48 and profile["warnings"] == []
    (trace,) = profile["traces"]
    data = fetch(agent, "p1", trace["name"])
    assert len(data) == trace["size_bytes"] == (trace_dir / trace["name"]).stat().st_size
    saved = tmp_path / trace["name"]
    saved.write_bytes(data)
    assert json.loads(gzip.decompress(data))["traceEvents"]  # opens as written
    assert summarize([saved]).steps is not None
    # a bounded fetch, from an offset
    assert fetch(agent, "p1", trace["name"], offset=10, max_bytes=5) == data[10:15]


def test_only_a_listed_trace_can_be_fetched(agent: AgentProcess) -> None:
    stub = agent.stub()
    stub.StartRun(
        agent_pb2.StartRunRequest(run_id="p2", spec=spec(profile=R.ProfileSpec(point=0))),
        timeout=10,
    )
    final = wait_run(stub, "p2")
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    trace_dir = agent.state_dir / "runs" / "p2" / "traces"
    os.symlink("/etc/hostname", trace_dir / "sneaky.json.gz")
    for name in ("../run.json", "../result.json", "sneaky.json.gz", "/etc/hostname", ""):
        with pytest.raises(grpc.RpcError) as caught:
            fetch(agent, "p2", name)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND, name
    with pytest.raises(grpc.RpcError) as caught:
        fetch(agent, "nope", "x.json.gz")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_trace_over_the_cap_is_deleted_with_a_warning(agent: AgentProcess) -> None:
    stub = agent.stub()
    run = spec("--profile-trace-pad", "200000", profile=R.ProfileSpec(point=0, max_bytes=50_000))
    stub.StartRun(agent_pb2.StartRunRequest(run_id="p3", spec=run), timeout=10)
    final = wait_run(stub, "p3")
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message  # never a failed benchmark
    profile = json.loads(final.result_json)["profile"]
    assert profile["traces"] == [] and profile["total_bytes"] == 0
    (warning,) = profile["warnings"]
    assert "over the cap of 50000 bytes" in warning and "deleted" in warning
    assert list((agent.state_dir / "runs" / "p3" / "traces").iterdir()) == []


def test_a_stop_that_times_out_is_a_warning_on_the_run(agent: AgentProcess) -> None:
    stub = agent.stub()
    run = spec(
        "--profile-stop-delay", "3",
        profile=R.ProfileSpec(point=0, window_seconds=0.1, stop_timeout_seconds=0.5),
    )  # fmt: skip
    stub.StartRun(agent_pb2.StartRunRequest(run_id="p4", spec=run), timeout=10)
    final = wait_run(stub, "p4")
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    result = json.loads(final.result_json)
    assert result["profile"]["window"]["ok"] is False
    assert any("profile: stop failed: no answer" in w for w in result["warnings"])


def test_reset_cache_is_on_by_default_for_a_vllm_sweep(agent: AgentProcess) -> None:
    """Two points on one vLLM: the agent sets dev mode and resets before each point."""
    stub = agent.stub()
    stub.StartRun(agent_pb2.StartRunRequest(run_id="c1", spec=spec()), timeout=10)
    final = wait_run(stub, "c1")
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    assert final.server.spec.env["VLLM_SERVER_DEV_MODE"] == "1"
    points = json.loads(final.result_json)["points"]
    assert [p["cache_reset"]["ok"] for p in points] == [True, True]
    assert "--profiler-config" not in final.server.spec.argv
