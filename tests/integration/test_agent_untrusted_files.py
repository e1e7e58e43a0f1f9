"""Integration, in a PID + mount namespace of its own: the real (root) agent runs a server whose
speed file and model folder were planted by another local user (issue 45.3). Before, another
user's ``mkfifo /tmp/sim-speed`` held the run at STARTING for good, past cancel and
max_duration, and a FIFO named ``*.safetensors`` did the same from the model folder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.integration.test_agent_runs import wait_run
from tests.support.agent_proc import AgentProcess
from tunelab.v1 import agent_pb2, run_pb2, server_pb2

pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]
R = run_pb2
OTHER_UID = 12345


def spec(model: str, *flags: str) -> run_pb2.RunSpec:
    argv = [sys.executable, "-m", "tunelab.bench.simulator", "--port", "{port}", "--model", model]
    settings = {"model": model, "concurrency": [1], "requests": 2, "input_len": 8, "output_len": 4}
    return R.RunSpec(
        server=server_pb2.ServerSpec(
            argv=[*argv, *flags], port=0, ready_model=model, stop_grace_seconds=5
        ),
        benchmark=R.BenchmarkSpec(builtin=R.BuiltinBenchmark(**settings)),  # type: ignore[arg-type]
        max_duration_seconds=60,
        experiment="it",
    )


def test_a_planted_speed_file_fifo_fails_the_start_at_once(
    agent: AgentProcess, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    fifo = shared / "sim-speed"
    os.mkfifo(fifo)
    os.chown(fifo, OTHER_UID, OTHER_UID)  # another user's, as in a world-writable /tmp
    stub = agent.stub()
    stub.StartRun(
        agent_pb2.StartRunRequest(run_id="f1", spec=spec("sim", "--speed-file", str(fifo))),
        timeout=10,
    )
    final = wait_run(stub, "f1", timeout=60)  # before: STARTING for good
    assert final.state == R.RUN_STATE_FAILED_STARTUP, final.message
    log = b"".join(
        c.data for c in stub.StreamLogs(agent_pb2.StreamLogsRequest(run_id="f1"), timeout=10)
    )
    assert b"a FIFO" in log, log[-2000:]
    engine = json.loads(final.provenance_json)["engine"]
    assert engine["version_source"].startswith("package metadata")  # not the planted file


def test_a_fifo_named_safetensors_does_not_hold_the_run(
    agent: AgentProcess, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    os.mkfifo(model / "model-00001-of-00001.safetensors")
    stub = agent.stub()
    stub.StartRun(agent_pb2.StartRunRequest(run_id="m1", spec=spec(str(model))), timeout=10)
    final = wait_run(stub, "m1", timeout=60)
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    recorded = json.loads(final.provenance_json)["model"]
    assert "not a regular file (a FIFO)" in recorded["error"] and recorded["config_sha256"]
