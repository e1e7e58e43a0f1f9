"""Lengths in tokens (issue 35 item 6, issue 37 item 4): random prompts leave room for the special
tokens the server's tokenizer adds, as vLLM's random dataset does; without a tokenizer the result
warns that lengths are approximate and every summary prints the server's own mean prompt tokens;
a tokenizer is read from a local file only."""

from __future__ import annotations

import io
import json
import math
import random
import socket
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.support.tiny_tokenizer import write_tokenizer
from tunelab.bench.config import BenchConfig
from tunelab.bench.console import render_summary
from tunelab.bench.datasets import Dataset
from tunelab.bench.promptlengths import (
    lengths_exact,
    prompt_tokens_line,
    server_mean_prompt_tokens,
)
from tunelab.bench.sweep import Sweep
from tunelab.bench.tokens import TokenPrompts, spec_tokenizer_problem
from tunelab.bench.workload import Workload


@pytest.fixture(scope="module")
def bos_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("bos"), bos=True)


def cfg(**kw: Any) -> BenchConfig:
    values: dict[str, Any] = {
        "url": "http://h:1", "model": "m", "concurrency": (1,), "input_len": 40, "output_len": 8,
    }  # fmt: skip
    values.update(kw)
    return BenchConfig(**values).with_preset()


def test_the_tokenizer_says_how_many_special_tokens_it_adds(bos_tokenizer: Path) -> None:
    tokens = TokenPrompts(str(bos_tokenizer))
    assert tokens.special_tokens == 1
    text = tokens.prompt(random.Random(1), 10)
    assert tokens.count(text) == 10 and tokens.count_with_special(text) == 11
    plain = TokenPrompts(str(write_tokenizer(bos_tokenizer.parent / "plain", bos=False)))
    assert plain.special_tokens == 0


@pytest.mark.parametrize(("range_ratio", "prefix_len"), [(0.0, 0), (0.0, 12), (0.3, 0)])
def test_random_prompts_have_vllms_length_at_the_server(
    bos_tokenizer: Path, range_ratio: float, prefix_len: int
) -> None:
    """The server counts text + BOS: the text has input_len - 1 tokens, so the server sees
    input_len (+ the prefix), not one more; the range ratio applies to input_len - 1."""
    config = cfg(tokenizer=str(bos_tokenizer), range_ratio=range_ratio, prefix_len=prefix_len)
    tokens = TokenPrompts(config.tokenizer)
    data = Dataset(config, tokens)
    assert data.describe()["special_tokens"] == 1
    seen = set()
    for i in range(40):
        p = data.prompt(0, i)
        at_server = tokens.count_with_special(p.text)
        assert at_server == p.input_len
        seen.add(p.input_len - prefix_len - 1)  # the drawn length of the text's own part
    if range_ratio:  # vLLM: [floor(39 * 0.7), ceil(39 * 1.3)] = [27, 51]
        assert min(seen) >= math.floor(39 * 0.7) and max(seen) <= math.ceil(39 * 1.3)
        assert len(seen) > 5
    else:
        assert seen == {39}


def test_the_request_body_carries_the_shorter_text(bos_tokenizer: Path) -> None:
    config = cfg(tokenizer=str(bos_tokenizer), input_len=32)
    tokens = TokenPrompts(config.tokenizer)
    planned = Workload(config, 0, tokens).request(0)
    assert tokens.count(json.loads(planned.body)["prompt"]) == 31 and planned.input_len == 32


def test_other_datasets_keep_their_lengths_in_the_text(bos_tokenizer: Path) -> None:
    """vLLM subtracts only in its random dataset; a shared-prefix prompt's text has prefix +
    suffix tokens and the server adds its BOS to that."""
    tokens = TokenPrompts(str(bos_tokenizer))
    config = cfg(dataset="shared-prefix", prefix_len=20, prefix_groups=2, tokenizer="x")
    data = Dataset(config, tokens)
    assert data.describe()["special_tokens"] == 0
    p = data.prompt(0, 3)
    assert tokens.count(p.text) == p.input_len == 60


def test_a_one_token_prompt_keeps_one_token_of_its_own(bos_tokenizer: Path) -> None:
    tokens = TokenPrompts(str(bos_tokenizer))
    p = Dataset(cfg(input_len=1, tokenizer="x"), tokens).prompt(0, 0)
    assert tokens.count(p.text) == 1 and p.input_len == 2


def test_without_a_tokenizer_the_result_warns_and_with_one_it_does_not(
    bos_tokenizer: Path,
) -> None:
    approximate = Sweep(cfg(requests=2), None, None).document([], "completed")
    assert any(w.startswith("lengths are approximate") for w in approximate["warnings"])
    assert approximate["dataset"]["lengths_exact"] is False
    exact = Sweep(cfg(requests=2, tokenizer=str(bos_tokenizer)), None, None)
    document = exact.document([], "completed")
    assert not any("approximate" in w for w in document["warnings"])
    assert document["dataset"]["lengths_exact"] is True


def test_loading_and_using_a_tokenizer_opens_no_connection(
    bos_tokenizer: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local tokenizer.json only: nothing is fetched from a hub at run time."""
    opened: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        opened.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: refuse(None, a))  # type: ignore[arg-type]
    tokens = TokenPrompts(str(bos_tokenizer.parent))  # the folder form
    data = Dataset(cfg(tokenizer="x", input_len=64), tokens)
    assert tokens.count_with_special(data.prompt(0, 0).text) == 64
    assert opened == []


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("model", None),
        ("llama/tokenizer.json", None),
        ("llama", None),
        ("", "must name a tokenizer.json"),
        ("/models/llama", "must be a relative path"),
        ("../llama", "must be a relative path"),
        ("a/../../b", "must be a relative path"),
        ("a\0b", "NUL"),
    ],
)
def test_a_specs_tokenizer_is_model_or_a_relative_path(name: str, problem: str | None) -> None:
    found = spec_tokenizer_problem(name)
    assert (found is None) if problem is None else (found is not None and problem in found)


POINTS: list[dict[str, Any]] = [
    {"completed": 3, "mean_input_tokens": 10.0},
    {"completed": 1, "mean_input_tokens": 30.0},
    {"completed": 0, "mean_input_tokens": None},
]


def test_the_server_mean_is_over_requests_not_points() -> None:
    assert server_mean_prompt_tokens(POINTS) == pytest.approx(15.0)  # (3*10 + 30) / 4
    assert server_mean_prompt_tokens([{"completed": 2, "mean_input_tokens": None}]) is None


def test_the_prompt_tokens_line() -> None:
    assert prompt_tokens_line(POINTS, True) == (
        "prompt tokens (server's count): mean 15.0 per request"
    )
    assert prompt_tokens_line(POINTS, False) == (
        "prompt tokens (server's count): mean 15.0 per request; lengths approximate: no tokenizer"
    )
    assert prompt_tokens_line([], False) == (
        "prompt tokens: the server reported none; lengths approximate: no tokenizer"
    )
    assert prompt_tokens_line([], None) is None
    assert lengths_exact({"dataset": {"name": "random", "lengths_exact": False}}) is False
    assert lengths_exact({"dataset": {"name": "file", "lengths_exact": False}}) is None
    assert lengths_exact({"points": []}) is None and lengths_exact(None) is None


def test_the_bench_summary_prints_the_servers_count() -> None:
    point = {
        "concurrency": 1, "request_rate": "inf", "completed": 4, "failed": 0,
        "request_throughput": 1.0, "output_throughput": 8.0, "mean_input_tokens": 127.25,
        "errors_by_kind": {}, "point_index": 0,
        **{f"{s}_{m}_ms": 1.0 for s in ("mean", "median", "p99")
           for m in ("ttft", "tpot", "itl_per_token", "e2el")},
    }  # fmt: skip
    document = {
        "config": {"model": "m"}, "status": "completed", "points": [point],
        "dataset": {"name": "random", "lengths": "approximate: ...", "lengths_exact": False},
        "warnings": [],
    }  # fmt: skip
    out = io.StringIO()
    render_summary(document, decode=False, console=Console(file=out, width=200))
    assert (
        "prompt tokens (server's count): mean 127.2 per request; lengths approximate: no "
        "tokenizer" in out.getvalue()
    )


def test_a_hub_id_is_read_from_the_local_hugging_face_cache_only(
    bos_tokenizer: Path, tmp_path: Path
) -> None:
    """A pasted `vllm bench serve` line names the model's hub id in --tokenizer: its file is
    taken from the cache a server on this host filled (refs/main's snapshot first), never
    fetched."""
    from tunelab.bench.tokens import hub_cache_tokenizer

    repo = tmp_path / "hub" / "models--org--tiny"
    for snapshot in ("old", "abc123"):
        (repo / "snapshots" / snapshot).mkdir(parents=True)
        (repo / "snapshots" / snapshot / "tokenizer.json").write_bytes(bos_tokenizer.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    want = repo / "snapshots" / "abc123" / "tokenizer.json"
    home = tmp_path / "home"
    assert hub_cache_tokenizer("org/tiny", {"HF_HUB_CACHE": str(tmp_path / "hub")}, home) == want
    assert hub_cache_tokenizer("org/tiny", {"HF_HOME": str(tmp_path)}, home) == want
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "hub").symlink_to(tmp_path / "hub")
    assert hub_cache_tokenizer("org/tiny", {}, home) == home / ".cache" / "huggingface" / str(
        want.relative_to(tmp_path)
    )
    (repo / "refs" / "main").unlink()  # no ref: the newest snapshot that has one
    assert hub_cache_tokenizer("org/tiny", {}, home) is not None
    for name in ("org/other", "tiny", "./org/tiny", "a/b/c"):
        assert hub_cache_tokenizer(name, {}, home) is None
    assert TokenPrompts(str(want)).special_tokens == 1
