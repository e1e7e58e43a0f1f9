"""Datasets: what each request of a point asks for. Every one is deterministic from the seed
(request ``i`` of point ``p`` depends on ``seed``, ``p`` and ``i`` only) and downloads nothing.

- ``random``: prompts of random text; input and output lengths each drawn from ``uniform``
  (vLLM's range ratio: ``[L(1-r), L(1+r)]``) or ``lognormal`` (mean ``L``, shape ``sigma``),
  with an optional shared prefix of ``prefix_len`` tokens before every prompt (vLLM's
  ``--random-prefix-len``: the input is prefix + drawn length);
- ``shared-prefix``: ``prefix_groups`` distinct prefixes of ``prefix_len`` tokens, each followed
  by a unique suffix of ``input_len`` tokens; request ``i`` uses prefix ``i mod K``, so the
  groups interleave (vLLM's ``prefix_repetition`` shuffles instead);
- ``multi-turn``: conversations of ``turns`` turns; turn ``t``'s prompt is the whole history
  (every earlier user message and the answer the server actually gave) plus a new user message
  of ``input_len`` tokens; see :mod:`tunelab.bench.sweep` for the pacing;
- ``file``: prompts read from a file (:mod:`tunelab.bench.promptfiles`), in a seeded order,
  cycled when the point asks for more than the file has; with ``file_filter="vllm"`` (set by
  ``--dataset-name sharegpt``) conversations are first dropped by vLLM's length rule
  (:func:`vllm_length_valid`);
- ``trace``: a request trace's rows in order, prompts synthesised to the recorded lengths from
  blocks of ``trace_block_size`` tokens, one block per hash id, so rows that share hash ids
  share those blocks (and their prefix-cache entries); sent at the recorded times.

With a tokenizer every synthetic length is exact in tokens (prompts are assembled from the
tokenizer's whole-word tokens, which concatenate without merging); without one, a length is a
number of common English words, about one token each, and the result warns so. ``random``
prompts, as vLLM's random dataset makes them, leave room for the special tokens the server's
tokenizer adds (``num_special_tokens_to_add``: a BOS, say): the prompt's text has
``input_len - specials`` tokens (the range ratio applied to that), so the server counts
``input_len``; the other datasets' texts have their lengths and the server adds its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunelab.bench import promptfiles
from tunelab.bench.tokens import TokenPrompts
from tunelab.common.durations import format_duration

if TYPE_CHECKING:
    from tunelab.bench.config import BenchConfig

DATASETS = ("random", "shared-prefix", "multi-turn", "file", "trace")
DISTRIBUTIONS = ("uniform", "lognormal")
APPROXIMATE = (
    "approximate: without a tokenizer (--tokenizer, or benchmark.tokenizer in a spec) a length of "
    "N is N common words, about one token each; the server's own count is in input_tokens"
)
SYNTHETIC = ("random", "shared-prefix", "multi-turn", "trace")  # lengths made, not read
LOGNORMAL_CAP = 64  # a lognormal draw is cut at 64 x its mean
# vLLM's is_valid_sequence defaults (vllm/benchmarks/datasets.py, ShareGPTDataset.sample)
MAX_SCHEDULE_S = 86_400.0  # a timed trace longer than a day is refused unless asked for
VLLM_MIN_LEN = 4
VLLM_MAX_PROMPT_LEN = 1024
VLLM_MAX_TOTAL_LEN = 2048
# the settings each dataset reads (its parameters in the provenance)
PARAMETERS: dict[str, tuple[str, ...]] = {
    "random": ("input_len", "output_len", "range_ratio", "output_range_ratio", "input_dist",
               "output_dist", "input_sigma", "output_sigma", "prefix_len"),
    "shared-prefix": ("input_len", "output_len", "range_ratio", "output_range_ratio",
                      "input_dist", "output_dist", "input_sigma", "output_sigma", "prefix_len",
                      "prefix_groups"),
    "multi-turn": ("input_len", "output_len", "range_ratio", "output_range_ratio", "input_dist",
                   "output_dist", "input_sigma", "output_sigma", "prefix_len", "turns",
                   "think_time_s"),
    "file": ("dataset_path", "file_format", "file_output_len", "file_filter", "output_len"),
    "trace": ("dataset_path", "trace_block_size", "trace_sec_multiplier", "trace_timed"),
}  # fmt: skip

_WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "experience effect use class control care field development role effort rate heart drug "
    "show leader light voice wife police mind price report decision son view relationship "
    "town"
)
VOCABULARY = _WORDS.split(" ")


@dataclass(frozen=True)
class Prompt:
    """One request's content: text (or chat messages), lengths, and where it belongs."""

    text: str
    input_len: int  # tokens asked for (words without a tokenizer); files: counted/estimated
    output_len: int  # max_tokens
    group: int | None = None  # prefix group (shared-prefix; trace: first hash id)
    at: float | None = None  # trace: seconds from the trace's first row
    messages: tuple[tuple[str, str], ...] | None = None  # a chat file's (role, content)


@dataclass(frozen=True)
class Turn:
    text: str  # the new user message
    input_len: int  # its length (the prompt is the history plus this)
    output_len: int


def _words(text: str) -> int:
    return len(text.split())


class TextSource:
    """Random text of an exact token count (with a tokenizer) or of N words (without)."""

    def __init__(self, tokens: TokenPrompts | None) -> None:
        self.tokens = tokens
        self._pieces = tokens.word_texts if tokens is not None else []
        self.exact = tokens is not None

    def text(self, rng: random.Random, n: int) -> str:
        if n <= 0:
            return ""
        if self.tokens is None:
            return " ".join(rng.choices(VOCABULARY, k=n))
        if self._pieces:
            return "".join(rng.choices(self._pieces, k=n))
        return self.tokens.prompt(rng, n)  # no whole-word tokens: vLLM's decode/re-encode

    def join(self, parts: list[str]) -> str:
        parts = [p for p in parts if p]
        return "".join(parts) if self.tokens is not None and self._pieces else " ".join(parts)

    def count(self, text: str) -> int:
        """Tokens with a tokenizer; words (the estimate) without one."""
        return self.tokens.count(text) if self.tokens is not None else len(text.split())


def draw_length(base: int, dist: str, ratio: float, sigma: float, rng: random.Random) -> int:
    """A length around ``base``: uniform in ``[floor(L(1-r)), ceil(L(1+r))]`` (vLLM's range
    ratio) or lognormal with mean ``L`` and shape ``sigma`` (cut to ``[1, 64 L]``)."""
    if dist == "lognormal" and sigma > 0:
        mu = math.log(base) - sigma * sigma / 2.0
        return max(1, min(LOGNORMAL_CAP * base, round(rng.lognormvariate(mu, sigma))))
    if ratio <= 0:
        return base
    low = max(1, math.floor(base * (1 - ratio)))
    high = max(low, math.ceil(base * (1 + ratio)))
    return rng.randint(low, high)


def vllm_length_valid(prompt_len: int, output_len: int, skip_min_output: bool) -> bool:
    """vLLM's ``is_valid_sequence`` with its defaults, as ``vllm bench serve --dataset-name
    sharegpt`` applies it: a prompt of at least 4 and at most 1024 tokens, an output of at least
    4 (not checked when ``--sharegpt-output-len`` sets it), prompt + output at most 2048."""
    return not (
        prompt_len < VLLM_MIN_LEN
        or (not skip_min_output and output_len < VLLM_MIN_LEN)
        or prompt_len > VLLM_MAX_PROMPT_LEN
        or prompt_len + output_len > VLLM_MAX_TOTAL_LEN
    )


@dataclass(frozen=True)
class Filtered:
    """What vLLM's ShareGPT length rule left of a file."""

    kept: int
    dropped: int
    lengths: str  # "tokenizer" (vLLM's count, special tokens included) or "words" (estimate)


class Dataset:
    """The requests of a run, built once per bench process from its config."""

    def __init__(self, config: BenchConfig, tokens: TokenPrompts | None) -> None:
        self.config = config
        self.source = TextSource(tokens)
        self.name = config.dataset
        self.problems: list[str] = []
        self.sha256 = ""
        self._items: list[promptfiles.FileItem] = []
        self._order: list[int] = []
        self._rows: list[promptfiles.TraceRow] = []
        self._blocks: dict[tuple[int, int], str] = {}
        self._trace_t0 = 0.0
        self._trace_scale = 1.0
        self.filtered: Filtered | None = None
        self.chat_template: bool | None = None  # None: not asked; False: the server has none
        # random: what the server's tokenizer adds to every prompt, left out of its text
        self.special = tokens.special_tokens if tokens is not None and self.name == "random" else 0
        if self.name in ("file", "trace"):
            loaded = promptfiles.load(
                config.dataset_path, "trace" if self.name == "trace" else config.file_format
            )
            self.sha256 = loaded.sha256
            self.problems = loaded.problems
            if self.name == "file":
                if not loaded.items:
                    raise promptfiles.DatasetFileError(
                        config.dataset_path, "is a trace, not a prompt file; use the trace dataset"
                    )
                self._items = loaded.items
                if not (config.output_len or config.file_output_len):
                    unsized = [i for i in loaded.items if i.output_len is None and i.reply is None]
                    if unsized:
                        raise promptfiles.DatasetFileError(
                            config.dataset_path,
                            f"{len(unsized)} of {len(loaded.items)} prompts have no output_len "
                            "(or max_tokens) of their own: give the output length for them "
                            "(--output-len; benchmark.output_len in a spec)",
                        )
                if config.file_filter == "vllm":
                    self._items = self._vllm_filter(loaded.items)
                self._order = list(range(len(self._items)))
                random.Random(f"file:{config.seed}").shuffle(self._order)
            else:
                self._rows = loaded.rows
                self._trace_t0 = min(r.timestamp for r in self._rows)
                # Mooncake's traces, AIPerf's mooncake_trace and inference-perf record
                # ``timestamp`` in ms; vLLM's timed_trace (the drop-in flags) sets 1 s a unit
                self._trace_scale = config.trace_sec_multiplier or 0.001
                self._check_schedule()
        else:
            self.sha256 = hashlib.sha256(
                json.dumps(self.parameters(), sort_keys=True).encode()
            ).hexdigest()

    def _check_schedule(self) -> None:
        """Refuse a timed replay longer than a day unless asked for: it is nearly always a
        trace read in the wrong unit (seconds for ms: 1000 times too slow)."""
        cfg = self.config
        if not cfg.timed_trace or cfg.duration_seconds or cfg.trace_long_schedule:
            return
        span = self.schedule_seconds(cfg.requests)
        if span > MAX_SCHEDULE_S:
            raise promptfiles.DatasetFileError(
                cfg.dataset_path,
                f"its schedule spans {format_duration(span)} ({self.timestamp_unit}), longer "
                "than a day; a trace in another unit needs --trace-sec-multiplier "
                "(dataset.sec_multiplier: 1 for seconds); replay it anyway with "
                "--trace-long-schedule (dataset.long_schedule: true)",
            )

    def schedule_seconds(self, requests: int = 0) -> float:
        """When the last of the first ``requests`` trace rows (0: all) is due, in seconds."""
        count = min(requests or len(self._rows), len(self._rows))
        return max((self.arrival(i) for i in range(count)), default=0.0)

    @property
    def timestamp_unit(self) -> str:
        """How the trace's timestamps are read, as the start of a replay says it."""
        named = {0.001: "timestamps in ms", 1.0: "timestamps in s"}
        scale = self._trace_scale
        return named.get(scale, f"timestamps x {scale:g} s")

    def _vllm_filter(self, items: list[promptfiles.FileItem]) -> list[promptfiles.FileItem]:
        """vLLM's ShareGPT rule: each conversation's first turn (the prompt) and second (the
        reply, whose length is the output unless ``file_output_len`` fixes it) measured as
        ``tokenizer(text).input_ids`` counts them; without a tokenizer, in words (approximate).
        A kept item carries vLLM's output length, so max_tokens is what vLLM would send."""
        tokens = self.source.tokens
        count = tokens.count_with_special if tokens is not None else _words
        fixed = self.config.file_output_len
        kept = []
        for item in items:
            out = fixed or (count(item.reply) if item.reply is not None else item.output_len)
            if out is None:  # not a ShareGPT pair: no reply to measure; the run's length
                out = self.config.output_len
            if vllm_length_valid(count(item.prompt), out, skip_min_output=fixed > 0):
                kept.append(dataclasses.replace(item, output_len=out))
        self.filtered = Filtered(
            len(kept), len(items) - len(kept), "tokenizer" if tokens is not None else "words"
        )
        if not kept:
            raise promptfiles.DatasetFileError(
                self.config.dataset_path,
                f"vLLM's ShareGPT length rule dropped all {len(items)} conversations "
                f"(prompt {VLLM_MIN_LEN}..{VLLM_MAX_PROMPT_LEN} tokens, output >= "
                f"{VLLM_MIN_LEN}, prompt + output <= {VLLM_MAX_TOTAL_LEN})",
            )
        return kept

    # what the result says about it ----------------------------------------------------------
    def wrap_in_chat_template(self, render: Callable[[list[str]], list[str] | None]) -> bool:
        """A file's prompts as ``render`` wraps them in the server's chat template (vLLM's
        custom dataset); False, prompts unchanged, when the server has none."""
        prompts = sorted({item.prompt for item in self._items})
        wrapped = render(prompts)
        self.chat_template = wrapped is not None
        if wrapped is not None:
            by_prompt = dict(zip(prompts, wrapped, strict=True))
            self._items = [dataclasses.replace(i, prompt=by_prompt[i.prompt]) for i in self._items]
        return self.chat_template

    def parameters(self) -> dict[str, Any]:
        return {k: getattr(self.config, k) for k in PARAMETERS[self.name]}

    @property
    def size(self) -> int:
        """Rows of a file or trace (0: synthetic, unbounded)."""
        return len(self._items) or len(self._rows)

    @property
    def lengths_exact(self) -> bool:
        return self.source.exact

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parameters": self.parameters(),
            "seed": self.config.seed,
            "sha256": self.sha256,
            "rows": self.size or None,
            "lengths_exact": self.lengths_exact,
            "lengths": "exact (tokenizer)" if self.lengths_exact else APPROXIMATE,
            "special_tokens": self.special,  # random: added by the server, left out of the text
            "malformed": len(self.problems),
            "filtered": None if self.filtered is None else dataclasses.asdict(self.filtered),
            "chat_template": self.chat_template,  # custom: wrapped by the server's template
            "trace_seconds_per_unit": self._trace_scale if self._rows else None,  # trace
        }

    def warnings(self) -> list[str]:
        out = []
        if self.problems:
            shown = "; ".join(self.problems[:10])
            more = f" and {len(self.problems) - 10} more" if len(self.problems) > 10 else ""
            out.append(f"{self.config.dataset_path}: skipped {shown}{more}")
        f = self.filtered
        if f is not None and f.dropped:
            how = "tokens" if f.lengths == "tokenizer" else "words (no --tokenizer: approximate)"
            out.append(
                f"{self.config.dataset_path}: vLLM's ShareGPT length rule dropped {f.dropped} of "
                f"{f.kept + f.dropped} conversations (lengths in {how})"
            )
        if self.name in SYNTHETIC and not self.lengths_exact:
            out.append(
                "lengths are approximate: without a tokenizer (--tokenizer, or benchmark.tokenizer "
                "in a spec) a length of N is N common words, about one token each; the server's "
                "own count is each point's mean_input_tokens"
            )
        return out

    # requests ---------------------------------------------------------------------------------
    def _lengths(self, rng: random.Random, special: int = 0) -> tuple[int, int]:
        """Input and output lengths drawn around the config's; the input around ``input_len``
        less ``special`` (vLLM's random dataset: the server adds them), at least 1."""
        cfg = self.config
        out_ratio = cfg.range_ratio if cfg.output_range_ratio < 0 else cfg.output_range_ratio
        base = max(1, cfg.input_len - special)
        n_in = draw_length(base, cfg.input_dist, cfg.range_ratio, cfg.input_sigma, rng)
        n_out = draw_length(cfg.output_len, cfg.output_dist, out_ratio, cfg.output_sigma, rng)
        return n_in, n_out

    def prefix(self, group: int) -> str:
        """Shared prefix ``group``: the same text at every point and request."""
        if not self.config.prefix_len:
            return ""
        rng = random.Random(f"prefix:{self.config.seed}:{group}")
        return self.source.text(rng, self.config.prefix_len)

    def prompt(self, point_index: int, index: int) -> Prompt:
        cfg = self.config
        rng = random.Random(f"{cfg.seed}:{point_index}:{index}")
        if self.name == "file":
            return self._file_prompt(index, rng)
        if self.name == "trace":
            return self._trace_prompt(index)
        n_in, n_out = self._lengths(rng, self.special)
        group = (index % cfg.prefix_groups) if self.name == "shared-prefix" else 0
        text = self.source.join([self.prefix(group), self.source.text(rng, n_in)])
        has_prefix = cfg.prefix_len > 0
        # input_len: what the server counts (the text's tokens and, random, its specials)
        length = cfg.prefix_len + n_in + self.special
        return Prompt(text, length, n_out, group if has_prefix else None)

    def conversation(self, point_index: int, index: int) -> list[Turn]:
        """The user messages of conversation ``index`` (multi-turn); the first carries the
        shared prefix, if any."""
        rng = random.Random(f"{self.config.seed}:{point_index}:conversation:{index}")
        turns = []
        for t in range(self.config.turns):
            n_in, n_out = self._lengths(rng)
            text = self.source.text(rng, n_in)
            if t == 0 and self.config.prefix_len:
                text = self.source.join([self.prefix(0), text])
                n_in += self.config.prefix_len
            turns.append(Turn(text, n_in, n_out))
        return turns

    def _file_prompt(self, index: int, rng: random.Random) -> Prompt:
        cfg = self.config
        item = self._items[self._order[index % len(self._items)]]
        output = cfg.file_output_len or item.output_len
        if output is None and item.reply is not None:
            output = max(1, self.source.count(item.reply))
        return Prompt(
            item.prompt, self.source.count(item.prompt), output or cfg.output_len, None, None,
            item.messages,
        )  # fmt: skip

    def _trace_prompt(self, index: int) -> Prompt:
        row = self._rows[index % len(self._rows)]
        size = self.config.trace_block_size
        parts: list[str] = []
        left = row.input_length
        for h in row.hash_ids:
            if left <= 0:
                break
            n = min(size, left)
            parts.append(self._block(h, n))
            left -= n
        if left > 0:  # fewer hash ids than the length needs: a unique tail
            rng = random.Random(f"trace-tail:{self.config.seed}:{row.line}")
            parts.append(self.source.text(rng, left))
        at = self.arrival(index)
        group = row.hash_ids[0] if row.hash_ids else None
        return Prompt(self.source.join(parts), row.input_length, row.output_length, group, at)

    def arrival(self, index: int) -> float:
        """Trace row ``index``'s send time: seconds after the first row, scaled."""
        row = self._rows[index % len(self._rows)]
        return (row.timestamp - self._trace_t0) * self._trace_scale

    def _block(self, hash_id: int, n: int) -> str:
        key = (hash_id, n)
        if key not in self._blocks:
            rng = random.Random(f"block:{self.config.seed}:{hash_id}:{n}")
            self._blocks[key] = self.source.text(rng, n)
        return self._blocks[key]
