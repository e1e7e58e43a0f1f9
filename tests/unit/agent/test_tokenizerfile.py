"""Unit: a run's tokenizer (``benchmark.tokenizer``) is read from the agent's datasets folder,
confined like a dataset file, or from the served model's own folder (``model``); it must load,
and its content hash goes into the provenance (issue 35 item 6)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.support.tiny_tokenizer import write_tokenizer
from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.provenance import benchmark_provenance
from tunelab.agent.runs.record import RunSpec
from tunelab.agent.runs.tokenizerfile import resolve_tokenizer, served_tokenizer
from tunelab.agent.servers.spec import ServerSpec

FIELD = "spec.benchmark.builtin.tokenizer"


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("made"))


@pytest.fixture
def folder(tmp_path: Path, tokenizer_file: Path) -> Path:
    root = tmp_path / "datasets"
    (root / "llama").mkdir(parents=True)
    (root / "llama" / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    (root / "broken.json").write_text("{}")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    (root / "out").symlink_to(tmp_path / "outside")
    return root


def test_a_folder_or_file_in_the_datasets_folder_is_resolved_and_hashed(folder: Path) -> None:
    file = folder / "llama" / "tokenizer.json"
    sha = hashlib.sha256(file.read_bytes()).hexdigest()
    for name in ("llama", "llama/tokenizer.json"):
        got = resolve_tokenizer({"tokenizer": name, "seed": 1}, folder, None)
        assert got["tokenizer"] == str(file.resolve()) and got["seed"] == 1
        assert got["tokenizer_file"] == name and got["tokenizer_sha256"] == sha
    spec = RunSpec(server=None, server_id="s", builtin=got, command=None, max_duration=0)
    provenance = benchmark_provenance(spec)
    assert provenance["dataset"]["parameters"]["tokenizer_sha256"] == sha
    plain = RunSpec(server=None, server_id="s", builtin={"seed": 1}, command=None, max_duration=0)
    assert benchmark_provenance(plain)["dataset_sha256"] != provenance["dataset_sha256"]
    assert resolve_tokenizer({"seed": 1}, folder, None) == {"seed": 1}


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/etc/passwd", "must be a relative path"),
        ("../outside", "must be a relative path"),
        ("out", "leads out of"),
        ("missing", "no tokenizer.json"),
        ("broken.json", "cannot load"),
    ],
)
def test_paths_outside_the_folder_missing_or_broken_are_refused(
    folder: Path, name: str, problem: str
) -> None:
    with pytest.raises(InvalidSpec, match=problem) as info:
        resolve_tokenizer({"tokenizer": name}, folder, None)
    assert info.value.field == FIELD


def test_model_is_the_served_models_own_folder(tmp_path: Path, tokenizer_file: Path) -> None:
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    no_datasets = tmp_path / "no-datasets-folder"
    argv = ("vllm", "serve", str(model), "--port", "{port}")
    got = resolve_tokenizer({"tokenizer": "model"}, no_datasets, ServerSpec(argv=argv, port=1))
    assert got["tokenizer"] == str(model / "tokenizer.json") and got["tokenizer_file"] == "model"
    relative = ServerSpec(
        argv=("python", "-m", "sglang", "--model-path", "tiny"), port=1, cwd=str(model.parent)
    )
    got = resolve_tokenizer({"tokenizer": "model"}, no_datasets, relative)
    assert got["tokenizer"] == str(model / "tokenizer.json")


def test_the_servers_own_tokenizer_flag_comes_first() -> None:
    assert served_tokenizer(["vllm", "serve", "/m", "--tokenizer", "/t"]) == "/t"
    assert served_tokenizer(["x", "--model-path", "/m", "--tokenizer-path=/t"]) == "/t"
    assert served_tokenizer(["vllm", "serve", "/m"]) == "/m"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("vllm", "serve", "meta-llama/Llama-3.1-8B"), "is not a local folder"),
        (("python", "-m", "tunelab.bench.simulator"), "names no model"),
    ],
)
def test_model_without_a_local_folder_is_refused(
    tmp_path: Path, argv: tuple[str, ...], problem: str
) -> None:
    with pytest.raises(InvalidSpec, match=problem) as info:
        resolve_tokenizer(
            {"tokenizer": "model"}, tmp_path, ServerSpec(argv=argv, port=1, cwd=str(tmp_path))
        )
    assert info.value.field == FIELD
    with pytest.raises(InvalidSpec, match="has none"):
        resolve_tokenizer({"tokenizer": "model"}, tmp_path, None)
