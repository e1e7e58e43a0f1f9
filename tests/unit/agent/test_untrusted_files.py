"""Files the root agent reads are opened as untrusted (issue 45.3): a FIFO never blocks, a link
is not followed out, a stranger's file does not steer the run, and every read is size-capped.
The findings: a FIFO named *.safetensors blocked a run for good; one 20 MB header named 20 ways
in the index took the agent to 2.5 GB; a 3 GiB tokenizer.json 3.1 GB; another user's
``mkfifo /tmp/sim-speed`` held a run at STARTING past cancel and max_duration."""

from __future__ import annotations

import errno
import json
import os
import struct
import sys
from pathlib import Path

import pytest

from tests.unit.agent.test_provenance import write_safetensors
from tunelab.agent.runs import modelfiles
from tunelab.agent.runs.modelfiles import describe_model, weight_bytes
from tunelab.agent.runs.provenance import engine_version
from tunelab.bench.simulator.upgrade import read_upgrade
from tunelab.bench.tokens import MAX_TOKENIZER_BYTES, TokenizerError, TokenPrompts
from tunelab.common.untrusted import UntrustedFile, link_root, read_untrusted

OTHER_UID = 12345


def shard(path: Path, tensors: dict[str, int], pad: int = 0) -> None:
    """write_safetensors, its header grown past ``pad`` bytes by empty tensors."""
    empty = {f"pad.{i:06d}": 0 for i in range(pad // 60)}
    write_safetensors(path, {**tensors, **empty})


def test_a_fifo_a_link_and_a_large_file_are_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # nobody writes: a blocking open would never return
    with pytest.raises(UntrustedFile, match="not a regular file \\(a FIFO\\)"):
        read_untrusted(tmp_path / "fifo", 100)
    (tmp_path / "secret").write_text("root's secret")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(UntrustedFile) as link:
        read_untrusted(tmp_path / "link", 100)
    assert link.value.errno == errno.ELOOP
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(UntrustedFile, match="101 bytes, more than the 100 read"):
        read_untrusted(tmp_path / "big", 100)
    assert read_untrusted(tmp_path / "big", 10, whole=False) == b"x" * 10
    with pytest.raises(FileNotFoundError):
        read_untrusted(tmp_path / "missing", 100)


def test_links_are_followed_only_inside_the_folder_or_its_hub_repository(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--org--m"
    snapshot = repo / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "blobs" / "sha").write_text("{}")
    (snapshot / "config.json").symlink_to(repo / "blobs" / "sha")
    (tmp_path / "outside").write_text("secret")
    (snapshot / "tokenizer.json").symlink_to(tmp_path / "outside")
    assert link_root(snapshot) == repo.resolve()
    assert read_untrusted(snapshot / "config.json", 10, links_within=link_root(snapshot)) == b"{}"
    with pytest.raises(UntrustedFile, match="outside"):
        read_untrusted(snapshot / "tokenizer.json", 10, links_within=link_root(snapshot))


@pytest.mark.needs_root
def test_a_file_that_steers_must_be_owned_by_root_or_this_user(tmp_path: Path) -> None:
    speed = tmp_path / "sim-speed"
    speed.write_text("1.3\nversion 9.9.9\n")
    assert read_upgrade(str(speed)).version == "9.9.9"
    os.chown(speed, OTHER_UID, OTHER_UID)  # planted by another local user
    with pytest.raises(SystemExit, match=f"owned by uid {OTHER_UID}"):
        read_upgrade(str(speed))


def test_a_planted_speed_file_fifo_or_link_is_refused_not_waited_for(tmp_path: Path) -> None:
    fifo = tmp_path / "sim-speed"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit, match="a FIFO"):
        read_upgrade(str(fifo))
    argv = [sys.executable, "-m", "tunelab.bench.simulator", "--speed-file", str(fifo)]
    # the agent's provenance records the package's version, and returns at once
    assert engine_version(argv, {})["version_source"].startswith("package metadata")
    fifo.unlink()
    (tmp_path / "shadow").write_text("root:$6$hash:19000:0:99999:7:::\n")
    fifo.symlink_to(tmp_path / "shadow")  # its first token would be shown in the error
    with pytest.raises(SystemExit) as info:
        read_upgrade(str(fifo))
    assert "symbolic link" in str(info.value) and "$6$" not in str(info.value)


def test_a_fifo_named_safetensors_is_an_error_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    os.mkfifo(tmp_path / "model.safetensors")
    found = describe_model(str(tmp_path))
    assert "not a regular file" in found["error"] and found["config_sha256"]


def test_one_header_named_many_ways_is_read_once(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    shard(tmp_path / "model-1.safetensors", {"w": 1000}, pad=200_000)
    (tmp_path / "same.safetensors").hardlink_to(tmp_path / "model-1.safetensors")
    spellings = ["model-1.safetensors", "./model-1.safetensors", "sub/../model-1.safetensors",
                 ".//model-1.safetensors", "same.safetensors"]  # fmt: skip
    index = {"weight_map": {f"t{i}": name for i, name in enumerate(spellings * 4)}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    reads: list[Path] = []
    real = modelfiles.safetensors_header

    def counting(path: Path, *args: object) -> dict[str, object]:
        reads.append(path)
        return real(path, *args)  # type: ignore[arg-type]

    modelfiles.safetensors_header = counting  # type: ignore[assignment]
    try:
        found = weight_bytes(tmp_path)
    finally:
        modelfiles.safetensors_header = real
    assert len(reads) == 1 and found["weight_bytes"] == 1000


def test_headers_are_capped_each_and_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "model.safetensors").write_bytes(struct.pack("<Q", 20 << 20) + b"{}")
    with pytest.raises(ValueError, match=f"header of {20 << 20} bytes"):
        weight_bytes(big)
    monkeypatch.setattr(modelfiles, "MAX_HEADERS_BYTES", 300_000)
    for i in range(3):  # three distinct shards of ~200 KB headers: past the total
        shard(tmp_path / f"m-{i}.safetensors", {f"w{i}": 10}, pad=150_000)
    with pytest.raises(ValueError, match="headers past 300000 bytes in all"):
        weight_bytes(tmp_path)
    (tmp_path / "escape").mkdir()
    index = {"weight_map": {"w": "../big/model.safetensors"}}
    (tmp_path / "escape" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UntrustedFile, match="outside"):
        weight_bytes(tmp_path / "escape")


def test_a_tokenizer_past_its_cap_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    with (tmp_path / "tokenizer.json").open("wb") as sparse:  # 3 GiB, no disk used
        sparse.truncate(3 << 30)
    with pytest.raises(TokenizerError, match=f"more than the {MAX_TOKENIZER_BYTES} read"):
        TokenPrompts(str(tmp_path))
    (tmp_path / "tokenizer.json").unlink()
    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(TokenizerError, match=r"not a regular file \(a FIFO\)"):
        TokenPrompts(str(tmp_path))


def test_a_vocabulary_past_its_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunelab.bench import tokens

    vocab = {f"w{i}": i for i in range(300)}
    doc = {"version": "1.0", "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
           "pre_tokenizer": {"type": "Whitespace"}}  # fmt: skip
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    assert TokenPrompts(str(tmp_path)).sha256
    monkeypatch.setattr(tokens, "MAX_VOCAB", 100)
    with pytest.raises(TokenizerError, match="a vocabulary of 300 entries \\(at most 100\\)"):
        TokenPrompts(str(tmp_path))
    monkeypatch.setattr(tokens, "MAX_JSON_ITEMS", 250)  # counted before the library parses it
    with pytest.raises(TokenizerError, match=r"about 30[0-9] JSON items"):
        TokenPrompts(str(tmp_path))


def _venv_with_metadata(tmp_path: Path, metadata: bytes | None) -> list[str]:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    info = tmp_path / "lib" / "python3.11" / "site-packages" / "vllm-0.0.0.dist-info"
    info.mkdir(parents=True)
    if metadata is None:
        os.mkfifo(info / "METADATA")
    else:
        (info / "METADATA").write_bytes(metadata)
    return [str(tmp_path / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]


def test_a_hostile_engine_version_is_recorded_printable_and_short(tmp_path: Path) -> None:
    hostile = "0.5.3\x1b]52;c;cHduZWQ=\x07\x1b]0;title\x07 <!channel> " + "x" * 1_000_000
    argv = _venv_with_metadata(
        tmp_path, f"Metadata-Version: 2.1\nName: vllm\nVersion: {hostile}\n\n".encode()
    )
    version = engine_version(argv, {})["version"]
    assert version.startswith("0.5.3]52;c;cHduZWQ=]0;title <!channel>") and len(version) <= 64
    assert version.isprintable()


def test_a_fifo_as_metadata_does_not_block_provenance(tmp_path: Path) -> None:
    argv = _venv_with_metadata(tmp_path, None)
    found = engine_version(argv, {})  # returns at once: the FIFO is refused, not waited on
    assert found["name"] == "vllm" and str(tmp_path) not in str(found["version_source"])


def test_a_tokenizer_link_is_followed_by_the_cli_and_only_inside_on_the_agent(
    tmp_path: Path,
) -> None:
    doc = {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}
    (tmp_path / "elsewhere.json").write_text(json.dumps(doc))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").symlink_to(tmp_path / "elsewhere.json")
    assert TokenPrompts(str(folder)).sha256  # the laptop's --tokenizer: the user's own link
    with pytest.raises(TokenizerError, match="outside"):
        TokenPrompts(str(folder), links_within=link_root(folder))  # a spec's, on the agent
