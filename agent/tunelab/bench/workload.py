"""The requests a point sends: random prompts, lengths, request bodies, and open-loop arrivals.

Prompts are random common English words, one word ≈ one token for the usual BPE tokenizers, or,
with a tokenizer (``--tokenizer``), of exactly the requested number of tokens; the input length
the server actually counted comes back in ``usage.prompt_tokens`` and is recorded beside the
requested one. Lengths with a range ratio ``r`` are uniform in ``[L(1-r), L(1+r)]``
(vLLM's meaning, not SGLang's ``[L·r, L]``).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tunelab.bench.config import BenchConfig
from tunelab.bench.tokens import TokenPrompts

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
class PlannedRequest:
    index: int
    input_len: int  # words sent (≈ tokens)
    output_len: int  # max_tokens sent
    body: bytes


def _length(base: int, ratio: float, rng: random.Random) -> int:
    if ratio <= 0:
        return base
    low = max(1, math.floor(base * (1 - ratio)))
    high = max(low, math.ceil(base * (1 + ratio)))
    return rng.randint(low, high)


class Workload:
    """Deterministic request bodies: request ``i`` of a point depends only on the seed, the point
    and ``i``, not on the order in which the closed loop's workers claim them."""

    def __init__(
        self, config: BenchConfig, point_index: int, tokens: TokenPrompts | None = None
    ) -> None:
        self.config = config
        self.point_index = point_index
        self.tokens = tokens

    def request(self, index: int) -> PlannedRequest:
        cfg = self.config
        rng = random.Random(f"{cfg.seed}:{self.point_index}:{index}")
        input_len = _length(cfg.input_len, cfg.range_ratio, rng)
        output_len = _length(cfg.output_len, cfg.range_ratio, rng)
        if self.tokens is not None:
            prompt = self.tokens.prompt(rng, input_len)
        else:
            prompt = " ".join(rng.choices(VOCABULARY, k=input_len))
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
        if cfg.api == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = prompt
        return PlannedRequest(index, input_len, output_len, json.dumps(payload).encode())


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
