"""vLLM's ShareGPT length filter on ``--dataset-name sharegpt`` (issue 26).

vLLM (``vllm/benchmarks/datasets.py``, ``ShareGPTDataset.sample`` with ``is_valid_sequence``'s
defaults) keeps a conversation when its first turn has 4..1024 tokens, its second (the output,
unless ``--sharegpt-output-len`` fixes it, which also lifts the output minimum) at least 4, and
both together at most 2048, counted as ``tokenizer(text).input_ids`` (special tokens included).
The committed file ``tests/fixtures/bench/sharegpt_lengths.json`` has conversations just on
either side of each bound; each prompt's first word is its id. The expected sets below are
worked out by hand from that rule (see the file's lengths in the comments), not recomputed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.bench.datasets import Dataset
from tunelab.bench.promptfiles import DatasetFileError
from tunelab.bench.tokens import TokenPrompts
from tunelab.cli.bench_cmd import config_from_args, register

FILE = Path(__file__).resolve().parents[2] / "fixtures" / "bench" / "sharegpt_lengths.json"
# words of (prompt, reply) per id: a 3/10, b 2/10, c 10/2, d 1023/100, e 1024/10,
# f 1000/1047, g 1000/1046, h 20/30 (and one single-turn entry, malformed)


@pytest.fixture(scope="module")
def bos_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One token per word plus a BOS the post-processor adds, as Llama's does: vLLM's count
    is then words + 1, tunelab's own prompt count (no special tokens) stays words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "<s>": 1, "w": 2}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    out = tmp_path_factory.mktemp("bos-tok")
    tok.save(str(out / "tokenizer.json"))
    return out


def parse(*argv: str) -> BenchConfig:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return config_from_args(parser.parse_args(["bench", "--model", "m", *argv]))


def kept(data: Dataset) -> dict[str, int]:
    """id -> max_tokens of each prompt the dataset would send."""
    prompts = [data.prompt(0, i) for i in range(data.size)]
    return {p.text.split()[0]: p.output_len for p in prompts}


def test_vllm_rule_with_a_tokenizer_counts_special_tokens(bos_tokenizer: Path) -> None:
    config = parse(
        "--dataset-name", "sharegpt", "--dataset-path", str(FILE),
        "--tokenizer", str(bos_tokenizer),
    )  # fmt: skip
    assert config.file_filter == "vllm"
    data = Dataset(config, TokenPrompts(config.tokenizer))
    # b: prompt 3 < 4; c: output 3 < 4; e: prompt 1025 > 1024; f: 1001 + 1048 = 2049 > 2048
    # a: 4 + 11; d: 1024 + 101; g: 1001 + 1047 = 2048; h: 21 + 31; max_tokens = vLLM's count
    assert kept(data) == {"a": 11, "d": 101, "g": 1047, "h": 31}
    assert data.describe()["filtered"] == {"kept": 4, "dropped": 4, "lengths": "tokenizer"}
    assert any("dropped 4 of 8 conversations (lengths in tokens)" in w for w in data.warnings())
    assert data.describe()["malformed"] == 1  # the single-turn entry (vLLM drops it too)


def test_fixed_output_len_lifts_the_output_minimum_but_not_the_total(
    bos_tokenizer: Path,
) -> None:
    config = parse(
        "--dataset-name", "sharegpt", "--dataset-path", str(FILE),
        "--tokenizer", str(bos_tokenizer), "--sharegpt-output-len", "1100",
    )  # fmt: skip
    data = Dataset(config, TokenPrompts(config.tokenizer))
    # c (output 3) now kept; d 1024 + 1100, f and g 1001 + 1100 exceed 2048; b, e as before
    assert kept(data) == {"a": 1100, "c": 1100, "h": 1100}


def test_without_a_tokenizer_lengths_are_words() -> None:
    config = parse("--dataset-name", "sharegpt", "--dataset-path", str(FILE))
    data = Dataset(config, None)
    # a: 3 words < 4; b: 2; c: output 2; e: 1024 words is within; f: 1000 + 1047 = 2047
    assert set(kept(data)) == {"d", "e", "f", "g", "h"}
    assert data.describe()["filtered"] == {"kept": 5, "dropped": 3, "lengths": "words"}
    assert any("approximate" in w for w in data.warnings())


def test_tunelab_own_file_dataset_does_not_filter() -> None:
    config = parse(
        "--url", "http://h:1", "--concurrency", "1", "--output-len", "8", "--dataset", "file",
        "--file-format", "sharegpt",
        "--dataset-path", str(FILE),
    )  # fmt: skip
    data = Dataset(config, None)
    assert config.file_filter == "" and set(kept(data)) == set("abcdefgh")
    assert data.describe()["filtered"] is None


def test_a_file_the_rule_empties_is_refused(tmp_path: Path) -> None:
    short = tmp_path / "short.json"
    turns = [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"}]
    short.write_text(f'[{{"conversations": {str(turns).replace(chr(39), chr(34))}}}]')
    config = parse("--dataset-name", "sharegpt", "--dataset-path", str(short))
    with pytest.raises(DatasetFileError, match="dropped all 1 conversations"):
        Dataset(config, None)


def test_relative_paths_are_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM opens --dataset-path from where it runs; tunelab's generator runs elsewhere."""
    monkeypatch.chdir(FILE.parent)
    config = parse("--dataset-name", "sharegpt", "--dataset-path", FILE.name, "--tokenizer", "t")
    assert config.dataset_path == str(FILE) and config.tokenizer == str(FILE.parent / "t")
