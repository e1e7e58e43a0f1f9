"""The requests a point sends: request bodies from the dataset, and open-loop arrivals.

Bodies: the dataset (:mod:`tunelab.bench.datasets`) says what each request asks for; this
module turns it into the OpenAI request. Arrivals: gamma inter-arrivals (``burstiness``; 1 =
Poisson) at a fixed rate, a ramp whose rate rises from a start to an end rate (vLLM's
``--ramp-up-strategy linear|exponential``), or a trace's recorded times.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tunelab.bench.config import BenchConfig
from tunelab.bench.datasets import VOCABULARY, Dataset, Prompt, draw_length
from tunelab.bench.tokens import TokenPrompts

__all__ = ["VOCABULARY", "PlannedRequest", "Workload", "arrival_offsets", "ramp_offsets"]


@dataclass(frozen=True)
class PlannedRequest:
    index: int
    input_len: int  # tokens asked for (≈ words without a tokenizer)
    output_len: int  # max_tokens sent
    body: bytes
    group: int | None = None  # prefix group
    turn: int | None = None  # multi-turn: 0-based turn of its conversation
    conversation: int | None = None
    at: float | None = None  # trace: seconds after the first row


def _length(base: int, ratio: float, rng: random.Random) -> int:
    return draw_length(base, "uniform", ratio, 0.0, rng)


class Workload:
    """Deterministic request bodies: request ``i`` of a point depends only on the seed, the point
    and ``i``, not on the order in which the closed loop's workers claim them."""

    def __init__(
        self,
        config: BenchConfig,
        point_index: int,
        tokens: TokenPrompts | None = None,
        dataset: Dataset | None = None,
    ) -> None:
        self.config = config
        self.point_index = point_index
        self.tokens = tokens
        self.dataset = dataset if dataset is not None else Dataset(config, tokens)

    def request(self, index: int) -> PlannedRequest:
        prompt = self.dataset.prompt(self.point_index, index)
        return self.planned(index, prompt)

    def planned(self, index: int, prompt: Prompt) -> PlannedRequest:
        if self.config.api == "chat":
            pairs = prompt.messages or (("user", prompt.text),)
            messages = [{"role": role, "content": content} for role, content in pairs]
            body = self.body(prompt.output_len, messages=messages)
        else:
            body = self.body(prompt.output_len, text=prompt.text)
        return PlannedRequest(
            index, prompt.input_len, prompt.output_len, body, prompt.group, at=prompt.at
        )

    def body(
        self, output_len: int, text: str = "", messages: list[dict[str, str]] | None = None
    ) -> bytes:
        cfg = self.config
        payload: dict[str, object] = {
            "model": cfg.model,
            "max_tokens": output_len,
            "stream": True,
            "stream_options": {"include_usage": True}
            | ({"continuous_usage_stats": True} if cfg.continuous_usage else {}),
            "ignore_eos": cfg.ignore_eos,
        }
        if cfg.send_temperature:
            payload["temperature"] = cfg.temperature
        if messages is not None:
            payload["messages"] = messages
        else:
            payload["prompt"] = text
        return json.dumps(payload).encode()


def arrival_offsets(
    rate: float, burstiness: float, seed: int, count: int = 0, duration: float = 0.0
) -> Iterator[float]:
    """Seconds from the point's start at which to send each request (gamma inter-arrivals with
    shape ``burstiness``; 1 = Poisson). With a ``count``, the gaps are rescaled so the last
    arrival is at exactly ``count / rate`` (no seed-to-seed drift of the achieved rate)."""
    rng = random.Random(f"arrivals:{seed}")
    scale = 1.0 / (rate * burstiness)
    if count:
        gaps = [rng.gammavariate(burstiness, scale) for _ in range(count)]
        factor = (count / rate) / sum(gaps)
        t = 0.0
        for gap in gaps:
            yield t
            t += gap * factor
        return
    t = 0.0
    while t < duration:
        yield t
        t += rng.gammavariate(burstiness, scale)


def ramp_rate(strategy: str, start: float, end: float, progress: float) -> float:
    """The rate at ``progress`` (0..1) of a ramp: linear or exponential from start to end."""
    progress = min(1.0, max(0.0, progress))
    if strategy == "exponential":
        return float(start * (end / start) ** progress)
    return start + (end - start) * progress


def ramp_offsets(
    strategy: str,
    start: float,
    end: float,
    burstiness: float,
    seed: int,
    count: int = 0,
    duration: float = 0.0,
) -> Iterator[float]:
    """Arrivals whose rate rises from ``start`` to ``end`` requests/s: over the requests
    (request ``i`` of ``n`` at ``i / (n - 1)`` of the way, as vLLM does) or, bounded by
    ``duration``, over time. Gaps are gamma with shape ``burstiness``; no rescaling."""
    rng = random.Random(f"ramp:{seed}")
    t = 0.0
    i = 0
    while (i < count) if count else (t < duration):
        yield t
        progress = i / max(count - 1, 1) if count else t / duration
        rate = ramp_rate(strategy, start, end, progress)
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        i += 1
        if not math.isfinite(t):
            return
