"""Integration: a real agent runs the simulator with engine metrics that step at known times;
the run's timeline carries each event within one step of when it happened, none on a steady
run, and a hostile engine /metrics leaves the run intact and the timeline bounded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_agent_runs import run_spec, wait_run
from tests.support.agent_proc import AgentProcess
from tunelab.analysis.timeline.events import find_events
from tunelab.analysis.timeline.model import parse
from tunelab.bench.timeline.document import MAX_VALUES
from tunelab.v1 import agent_pb2, run_pb2

NVML = Path(__file__).parents[1] / "fixtures" / "nvml" / "h200-busy-v2.json"
STEP = 0.5


def calm_gpu(tmp_path: Path) -> Path:
    """The busy H200 snapshot without its power-cap throttle: a GPU that events leave alone."""
    snapshot = json.loads(NVML.read_text())
    for device in snapshot["devices"]:
        device["fields"].update(clock_event_reasons=0, power_watts=420.0)
    path = tmp_path / "nvml-calm.json"
    path.write_text(json.dumps(snapshot))
    return path


@pytest.fixture
def gpu_agent(tmp_path: Path) -> Any:
    proc = AgentProcess(tmp_path / "agent", ["--nvml-snapshot", str(calm_gpu(tmp_path))]).start()
    try:
        yield proc
    finally:
        proc.terminate()


def run(agent: AgentProcess, run_id: str, *sim: str, seconds: float) -> dict[str, Any]:
    spec = run_spec(
        *sim,
        concurrency=[4],
        requests=0,
        duration_seconds=seconds,
        output_len=16,
        warmup=2,
        timeline_step_seconds=STEP,
        max_duration=120,
    )
    agent.stub().StartRun(agent_pb2.StartRunRequest(run_id=run_id, spec=spec), timeout=10)
    final = wait_run(agent.stub(), run_id, 120)
    assert final.state == run_pb2.RUN_STATE_SUCCEEDED, final.message
    result: dict[str, Any] = json.loads(final.result_json)
    return result


def first_request_s(timeline: dict[str, Any]) -> float:
    """When the simulator's clock for its phases started: the first request sent."""
    sent = timeline["series"]["client.sent"]
    return float(next(w for w, v in enumerate(sent) if v) * timeline["step_seconds"])


def test_each_scripted_event_is_found_within_one_step(gpu_agent: AgentProcess) -> None:
    result = run(
        gpu_agent,
        "phases",
        "--phase", "queue@3-6",
        "--phase", "cache-full@8-11",
        "--phase", "slow@13x3",
        seconds=17,
    )  # fmt: skip
    document = result["timeline"]
    assert "client_timeline" not in result  # merged into the one timeline
    origin = first_request_s(document)  # within a step of the true first request
    found = {e.kind: e for e in find_events(parse(document))}
    assert set(found) == {"batch_limit", "kv_cache_full", "throughput_step"}, found
    for kind, at in (("batch_limit", 3.0), ("kv_cache_full", 8.0), ("throughput_step", 13.0)):
        assert abs(found[kind].at_s - (origin + at)) <= 2 * STEP, (kind, found[kind], origin)
    assert found["batch_limit"].values["flag"] == "--max-num-seqs"
    assert found["kv_cache_full"].values["kv_cache_usage_max"] == 1.0
    assert found["kv_cache_full"].values["preemptions"] >= 10  # 5/s for 3 s, as counted
    assert document["gpus"][0]["power_limit_watts"] == 700.0
    assert document["series"]["host.client_cpu_ratio"][-2] is not None


def test_a_steady_run_has_no_events(gpu_agent: AgentProcess) -> None:
    document = run(gpu_agent, "steady", seconds=8)["timeline"]
    assert [e.to_dict() for e in find_events(parse(document))] == []
    completed = sum(v or 0 for v in document["series"]["client.completed"])
    assert completed > 0 and document["engine"] == "vllm"


@pytest.mark.parametrize("fault", ["huge", "slow", "malformed"])
def test_a_hostile_engine_metrics_leaves_the_run_and_a_bounded_timeline(
    gpu_agent: AgentProcess, fault: str
) -> None:
    result = run(gpu_agent, f"hostile-{fault}", "--metrics-fault", fault, seconds=4)
    assert result["points"][0]["completed"] > 0
    document = result["timeline"]
    assert document["engine"] == ""  # never read
    assert all(
        v is None for n, s in document["series"].items() if n.startswith("engine.") for v in s
    )
    assert sum(v or 0 for v in document["series"]["client.completed"]) > 0
    assert document["windows"] * len(document["series"]) <= MAX_VALUES
    assert len(json.dumps(document)) < 2 * 1024 * 1024
