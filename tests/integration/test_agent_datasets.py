"""Integration: a run on the real agent reads its file dataset from the agent's datasets
folder, confined, with the content hash checked and recorded (issue 26)."""

from __future__ import annotations

import hashlib
import json

import grpc
import pytest

from tests.integration.test_agent_runs import run_spec, wait_run
from tests.support.agent_proc import AgentProcess
from tunelab.v1 import agent_pb2, run_pb2


def test_a_file_dataset_from_the_datasets_folder(agent: AgentProcess) -> None:
    folder = agent.state_dir / "datasets"
    folder.mkdir(exist_ok=True)
    text = "".join(json.dumps({"prompt": f"tell me about {w}", "output_len": 5}) + "\n"
                   for w in ("cats", "dogs", "owls"))  # fmt: skip
    (folder / "prompts.jsonl").write_text(text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    spec = run_spec(requests=6)
    spec.benchmark.builtin.dataset.CopyFrom(
        run_pb2.DatasetSpec(name="file", path="prompts.jsonl", sha256=sha)
    )
    stub = agent.stub()
    stub.StartRun(agent_pb2.StartRunRequest(run_id="ds1", spec=spec), timeout=10)
    final = wait_run(stub, "ds1")
    assert final.state == run_pb2.RUN_STATE_SUCCEEDED, final.message
    result = json.loads(final.result_json)
    assert result["dataset"]["name"] == "file" and result["dataset"]["sha256"] == sha
    assert result["points"][0]["completed"] == 6
    assert result["points"][0]["total_output_tokens"] == 30
    provenance = json.loads(final.provenance_json)
    assert provenance["benchmark"]["dataset"]["content_sha256"] == sha


@pytest.mark.parametrize(
    ("path", "sha", "field"),
    [
        # refused by the benchmark's own check first, which names it as a spec file does
        ("../runs/x.jsonl", "", "benchmark.dataset.path"),
        ("/etc/hostname", "", "benchmark.dataset.path"),
        ("missing.jsonl", "", "spec.benchmark.builtin.dataset.path"),
        ("p.jsonl", "0" * 64, "spec.benchmark.builtin.dataset.sha256"),
    ],
)
def test_a_dataset_outside_the_folder_or_with_another_hash_is_refused(
    agent: AgentProcess, path: str, sha: str, field: str
) -> None:
    folder = agent.state_dir / "datasets"
    folder.mkdir(exist_ok=True)
    (folder / "p.jsonl").write_text('{"prompt": "x"}\n')
    spec = run_spec()
    spec.benchmark.builtin.dataset.CopyFrom(run_pb2.DatasetSpec(name="file", path=path, sha256=sha))
    with pytest.raises(grpc.RpcError) as info:
        agent.stub().StartRun(agent_pb2.StartRunRequest(run_id="bad", spec=spec), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (info.value.details() or "")
