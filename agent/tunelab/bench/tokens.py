"""Prompts of an exact token length, with the server's own tokenizer (``--tokenizer PATH``,
or ``benchmark.tokenizer`` in a spec, which the agent resolves to a local path).

Words first: the vocabulary's whole-word tokens (`` word``, which encode back to themselves and,
space-led, never merge with a neighbour) make a prompt of exactly N tokens by construction. A
tokenizer without enough of them gets ``vllm bench serve``'s method: random ids decoded to text
and re-encoded, cut or topped up until the text encodes to exactly N.

Only a local ``tokenizer.json`` (or a folder holding one) is read: nothing is looked up on a hub
and nothing is downloaded. The ``tokenizers`` library is a core dependency, imported when a
tokenizer is first loaded (the agent and the CLI start without it).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from tunelab.common.untrusted import read_untrusted

MAX_ROUNDS = 16
MIN_WORDS = 50
# A tokenizer.json is read as an untrusted file (tunelab.common.untrusted), then parsed from
# those bytes (never reopened by name): the largest real ones are ~35 MB (Gemma's 262k
# vocabulary), and a 3 GiB one took the agent to 3.1 GB. Before parsing, its JSON items are
# counted (commas and opening brackets: real ones have at most ~1 M, vocabulary and merges),
# since parsing 5 M entries alone takes 13 s; after, a vocabulary past MAX_VOCAB is refused
# before its words are listed (5 M entries took 46.7 s and 2 GB in all).
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
MAX_JSON_ITEMS = 2_000_000
MAX_VOCAB = 1 << 20
READ_SECONDS = 30.0
# benchmark.tokenizer in a spec: this word names the served model's own folder; anything else
# is a path relative to the agent's datasets folder (resolved and confined there by the agent)
SERVED_MODEL = "model"


def hub_cache_tokenizer(name: str, env: Mapping[str, str], home: Path) -> Path | None:
    """A hub id's ``tokenizer.json`` where the Hugging Face cache already holds it (a `vllm
    bench serve` line names the model's hub id in --tokenizer; a server on this host fetched
    it): ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``
    (``~/.cache``), snapshot of ``refs/main`` first. Read only: nothing is ever downloaded."""
    parts = name.split("/")
    if len(parts) != 2 or not all(parts) or name.startswith((".", "~")):
        return None
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        hf_home = env.get("HF_HOME") or str(
            Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "huggingface"
        )
        cache = str(Path(hf_home) / "hub")
    repo = Path(cache) / f"models--{parts[0]}--{parts[1]}"
    snapshots = repo / "snapshots"
    try:
        main = (repo / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    if main and (snapshots / main / "tokenizer.json").is_file():
        return snapshots / main / "tokenizer.json"
    found = sorted(snapshots.glob("*/tokenizer.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def spec_tokenizer_problem(name: str) -> str | None:
    """What is wrong with ``benchmark.tokenizer``'s value as a spec may give it (the controller
    at submission, the agent again at StartRun), or None: ``model``, or a relative path that
    stays inside the agent's datasets folder."""
    if not name:
        return "must name a tokenizer.json (or its folder) in the agent's datasets folder, or model"
    if "\0" in name:
        return "must not contain NUL bytes"
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return (
            f"{name!r} must be a relative path inside the agent's datasets folder (or 'model', "
            "the served model's own folder)"
        )
    return None


def _is_word(text: str) -> bool:
    return len(text) > 1 and text[0] == " " and text[1:].isalpha() and text[1:].isascii()


class TokenizerError(Exception):
    pass


class TokenPrompts:
    def __init__(self, path: str, links_within: str | Path | None = None) -> None:
        """``links_within``: a link is followed only to a file inside that folder (the agent,
        reading a spec's tokenizer); without it (the CLI's ``--tokenizer``), wherever it goes.
        Either way the file is read as untrusted: no FIFO, at most its caps."""
        from tokenizers import Tokenizer  # a core dependency; loaded here, when first needed

        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.exists():  # a local file only: nothing is downloaded
            raise TokenizerError(
                f"--tokenizer {path}: no such file: {file} (a hub id is read from the local "
                "Hugging Face cache only, where it was not found; nothing is downloaded)"
            )
        try:
            target = file if links_within is not None else Path(os.path.realpath(file))
            raw = read_untrusted(
                target, MAX_TOKENIZER_BYTES, links_within=links_within, seconds=READ_SECONDS
            )
        except OSError as exc:  # UntrustedFile names the file and the bound
            raise TokenizerError(f"--tokenizer {path}: cannot read {exc}") from None
        self.sha256 = hashlib.sha256(raw).hexdigest()
        items = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
        if items > MAX_JSON_ITEMS:
            raise TokenizerError(
                f"--tokenizer {path}: {file} has about {items} JSON items "
                f"(vocabulary and merges; at most {MAX_JSON_ITEMS})"
            )
        try:
            self._tok: Any = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as exc:  # the library raises its own untyped errors for bad files
            raise TokenizerError(f"--tokenizer {path}: cannot load {file}: {exc}") from None
        del raw
        size = int(self._tok.get_vocab_size())
        if size > MAX_VOCAB:
            raise TokenizerError(
                f"--tokenizer {path}: a vocabulary of {size} entries (at most {MAX_VOCAB})"
            )
        special = set(self._tok.get_added_tokens_decoder())
        self._ids = [i for i in range(self._tok.get_vocab_size()) if i not in special]
        if not self._ids:
            raise TokenizerError(f"--tokenizer {path}: the vocabulary is empty")
        self._words = self._word_tokens()
        self.path = path
        # what the server's tokenizer adds to every prompt (BOS, ...): vLLM's
        # tokenizer.num_special_tokens_to_add(), from the same post-processor
        self.special_tokens = int(self._tok.num_special_tokens_to_add(False))

    def _word_tokens(self) -> list[int]:
        """Ids whose text is one space-led word that encodes back to exactly that id."""
        texts = [self._decode([i]) for i in self._ids]
        candidates = [(i, t) for i, t in zip(self._ids, texts, strict=True) if _is_word(t)]
        if not candidates:
            return []
        encoded = self._tok.encode_batch([t for _, t in candidates], add_special_tokens=False)
        words = [i for (i, _), e in zip(candidates, encoded, strict=True) if e.ids == [i]]
        return words if len(words) >= MIN_WORDS else []

    @property
    def word_texts(self) -> list[str]:
        """The whole-word tokens' texts (space-led): any concatenation of them encodes to
        exactly one token each, so prompts can be assembled from parts. Empty when the
        tokenizer has too few of them."""
        if not hasattr(self, "_word_texts"):
            self._word_texts = [self._decode([i]) for i in self._words]
        return self._word_texts

    def _decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_with_special(self, text: str) -> int:
        """Tokens as ``tokenizer(text).input_ids`` counts them (the post-processor's BOS/EOS
        included): vLLM's ShareGPT length filter measures this way."""
        return len(self._tok.encode(text, add_special_tokens=True).ids)

    def prompt(self, rng: random.Random, length: int) -> str:
        """Text that encodes to exactly ``length`` tokens (the closest found after a bound)."""
        if self._words:
            text = self._decode(rng.choices(self._words, k=length))
            if self.count(text) == length:
                return text
        ids = rng.choices(self._ids, k=length)
        best = self._decode(ids)
        for _ in range(MAX_ROUNDS):
            text = self._decode(ids)
            again = self._tok.encode(text, add_special_tokens=False).ids
            if len(again) == length:
                return text
            best = text
            ids = (
                again[:length]
                if len(again) > length
                else again + rng.choices(self._ids, k=length - len(again))
            )
        return best
