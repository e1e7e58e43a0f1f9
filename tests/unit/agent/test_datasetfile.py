"""Unit: a run's dataset file is read from the agent's datasets folder only, confined like
``result_file``, and its content hash checked and recorded (issue 26)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.datasetfile import resolve_dataset
from tunelab.agent.runs.provenance import benchmark_provenance
from tunelab.agent.runs.record import RunSpec


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "datasets"
    (root / "traces").mkdir(parents=True)
    (root / "traces" / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 3, "output_length": 2}\n'
    )
    (tmp_path / "secret.jsonl").write_text('{"prompt": "not yours"}\n')
    (root / "out").symlink_to(tmp_path / "secret.jsonl")
    return root


def test_a_file_in_the_folder_is_resolved_and_hashed(folder: Path) -> None:
    content = (folder / "traces" / "t.jsonl").read_bytes()
    sha = hashlib.sha256(content).hexdigest()
    got = resolve_dataset({"dataset": "trace", "dataset_path": "traces/t.jsonl"}, folder)
    assert got["dataset_path"] == str((folder / "traces" / "t.jsonl").resolve())
    assert got["dataset_sha256"] == sha and got["dataset_file"] == "traces/t.jsonl"
    checked = {"dataset_path": "traces/t.jsonl", "dataset_sha256": sha.upper()}
    assert resolve_dataset(checked, folder)["dataset_sha256"] == sha
    spec = RunSpec(server=None, server_id="s", builtin=got, command=None, max_duration=0)
    dataset = benchmark_provenance(spec)["dataset"]
    assert dataset["content_sha256"] == sha and dataset["name"] == "trace"
    assert dataset["file"] == "traces/t.jsonl"
    assert resolve_dataset({"dataset": "random"}, folder) == {"dataset": "random"}


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/etc/passwd", "must be a relative path"),
        ("../secret.jsonl", "must be a relative path"),
        ("out", "leads out of"),
        ("traces/missing.jsonl", "is not a file"),
        ("traces", "is not a file"),
    ],
)
def test_paths_outside_the_folder_or_missing_are_refused(
    folder: Path, name: str, problem: str
) -> None:
    with pytest.raises(InvalidSpec, match=problem) as info:
        resolve_dataset({"dataset_path": name}, folder)
    assert info.value.field == "spec.benchmark.builtin.dataset.path"


def test_a_hash_mismatch_and_a_missing_folder_are_refused(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="has sha256") as info:
        resolve_dataset({"dataset_path": "traces/t.jsonl", "dataset_sha256": "0" * 64}, folder)
    assert info.value.field == "spec.benchmark.builtin.dataset.sha256"
    with pytest.raises(InvalidSpec, match="no datasets folder"):
        resolve_dataset({"dataset_path": "t.jsonl"}, tmp_path / "nowhere")


def test_a_random_run_hashes_as_before_datasets_existed() -> None:
    """Dataset settings at their defaults are left out of the provenance hash, so a random run
    recorded before this change and one after it compare as the same dataset."""
    from tunelab.bench.config import BenchConfig

    old = {"api": "completions", "input_len": 64, "output_len": 8, "seed": 1, "requests": 4}
    new = BenchConfig(
        url="http://h:1", concurrency=(1,), input_len=64, output_len=8, seed=1, requests=4
    ).to_dict()

    def sha(builtin: dict[str, object]) -> str:
        spec = RunSpec(server=None, server_id="s", builtin=builtin, command=None, max_duration=0)
        return str(benchmark_provenance(spec)["dataset_sha256"])

    keys = ("api", "input_len", "output_len", "range_ratio", "seed", "requests",
            "duration_seconds", "warmup", "preset", "ignore_eos", "temperature")  # fmt: skip
    assert sha({k: new[k] for k in keys}) == sha(new)
    assert sha(old) != sha({**new, "dataset": "shared-prefix", "prefix_len": 5})


def test_a_file_with_no_usable_line_is_refused_at_start(folder: Path) -> None:
    (folder / "bad.jsonl").write_text("nope\n")
    with pytest.raises(InvalidSpec, match="line 1: not JSON") as info:
        resolve_dataset({"dataset": "file", "dataset_path": "bad.jsonl"}, folder)
    assert info.value.field == "spec.benchmark.builtin.dataset.path"
    assert str(folder) not in info.value.problem  # named as the spec named it


def test_a_trace_over_a_day_is_refused_before_the_server_starts(folder: Path) -> None:
    """Issue 46: ``timestamp`` is in ms (Mooncake); 25 h of it is refused at StartRun unless
    the spec asks for it (``dataset.long_schedule``)."""
    (folder / "long.jsonl").write_text(
        '{"timestamp": 0, "input_length": 3, "output_length": 2}\n'
        '{"timestamp": 90000000, "input_length": 3, "output_length": 2}\n'
    )
    with pytest.raises(InvalidSpec, match="longer than a day") as info:
        resolve_dataset({"dataset": "trace", "dataset_path": "long.jsonl"}, folder)
    assert info.value.field == "spec.benchmark.builtin.dataset.path"
    assert "'long.jsonl'" in str(info.value)  # the spec's name, not the agent's path
    asked = {"dataset": "trace", "dataset_path": "long.jsonl", "trace_long_schedule": True}
    assert resolve_dataset(asked, folder)["dataset_file"] == "long.jsonl"
