"""The engine's own ``/metrics`` read for the timeline: a few families per engine profile.

Names are the engines' own (checked against a real vLLM 0.32 and SGLang's source, see
``docs/timeline.md``): a gauge is read as is, a counter as its rise per window. Samples of one
family are summed over their label sets (one per model name or data-parallel rank). A fetch is
capped in bytes and time; a body that is too big, too slow or not the text format leaves the
window's engine values empty and nothing else.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tunelab.agent.metrics.engines import fetch_metrics, split_sample

MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class EngineSeries:
    """One timeline series: the engine families that give it (first present wins)."""

    series: str
    families: tuple[str, ...]
    counter: bool = False


# per engine profile; batch_flag is the flag whose limit "running stays flat" points at
PROFILE_SERIES: Mapping[str, tuple[EngineSeries, ...]] = {
    "vllm": (
        EngineSeries("engine.running", ("vllm:num_requests_running",)),
        EngineSeries("engine.waiting", ("vllm:num_requests_waiting",)),
        EngineSeries(
            "engine.kv_cache_usage", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        ),
        EngineSeries("engine.preemptions", ("vllm:num_preemptions_total",), counter=True),
        EngineSeries(
            "engine.prefix_cache_hits",
            ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            counter=True,
        ),
        EngineSeries(
            "engine.prefix_cache_queries",
            ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
            counter=True,
        ),
        EngineSeries("engine.generation_tokens", ("vllm:generation_tokens_total",), counter=True),
    ),
    "sglang": (
        EngineSeries("engine.running", ("sglang:num_running_reqs",)),
        EngineSeries("engine.waiting", ("sglang:num_queue_reqs",)),
        EngineSeries("engine.kv_cache_usage", ("sglang:token_usage",)),
        EngineSeries("engine.preemptions", ("sglang:num_retracted_requests_total",), counter=True),
        EngineSeries("engine.prefix_cache_hits", ("sglang:cached_tokens_total",), counter=True),
        EngineSeries("engine.prefix_cache_queries", ("sglang:prompt_tokens_total",), counter=True),
        EngineSeries("engine.generation_tokens", ("sglang:generation_tokens_total",), counter=True),
    ),
}
BATCH_FLAGS = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests"}
COUNTERS = frozenset(s.series for rows in PROFILE_SERIES.values() for s in rows if s.counter)


def parse_engine(text: str) -> tuple[str, dict[str, float]]:
    """(profile, series -> value) from an exposition; the profile is whichever engine's names
    appear ("" when neither). ValueError on a malformed sample line of a wanted family."""
    wanted = {f for rows in PROFILE_SERIES.values() for s in rows for f in s.families}
    sums: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in wanted:
            continue
        _, _, rest = split_sample(line)
        sums[name] = sums.get(name, 0.0) + float(rest.split()[0])
    for profile, rows in PROFILE_SERIES.items():
        values: dict[str, float] = {}
        for row in rows:
            family = next((f for f in row.families if f in sums), None)
            if family is not None:
                values[row.series] = sums[family]
        if values:
            return profile, values
    return "", {}


Fetch = Callable[[int, float, int], str]


def fetch_capped(port: int, timeout: float, max_bytes: int = MAX_BYTES) -> str:
    return fetch_metrics(port, timeout, max_bytes)


def read_engine(
    port: int, timeout: float, fetch: Fetch = fetch_capped
) -> tuple[str, dict[str, float]]:
    """The engine's series now; ("", {}) when it did not answer in time or in shape."""
    try:
        return parse_engine(fetch(port, timeout, MAX_BYTES))
    except (OSError, http.client.HTTPException, ValueError):
        return "", {}
