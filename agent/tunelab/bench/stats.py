"""Per-point figures from request records, named as ``vllm bench serve`` names them plus ours.

Definitions (successful, measured requests only; times in ms in the output):
- TTFT: request written to the socket → first token-bearing chunk.
- E2E (``e2el``): request written → last token-bearing chunk.
- send delay: the client began the request → wrote it (pool wait, connect, building it).
- TPOT: per request ``(E2E - TTFT) / (output_tokens - 1)``, for requests with > 1 token.
- ITL per chunk (``itl``, vLLM's ITL): every gap between consecutive token-bearing chunks.
- ITL per token (``itl_per_token``): each gap divided by the tokens its chunk carries, counted
  once per token; with only a final usage total, the request's mean tokens per chunk is used.
- Throughputs divide by the point's duration: first dispatch → last measured request done.
- Client queue time (vLLM's ``client_queue_time``, and ``queue_times`` per request): arrived →
  begun. An open loop's request arrives when it is due; a closed loop's all arrive at the
  point's start (vLLM's infinite rate), so theirs is the wait for a free slot of the
  concurrency. Dispatch lag: could begin (due, slot free) → begun, the client's own lateness.
- ``max_concurrent_requests`` and ``max_output_tokens_per_s``: vLLM's definitions, the most
  requests active and tokens received in any one-second bucket from the first start;
  ``max_in_flight_requests`` is ours, the most requests in flight at one instant.
Percentiles interpolate linearly between order statistics (numpy's and vLLM's default).
Per-request arrays (vLLM's ``--save-detailed``) are in request order, in seconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from tunelab.bench.stream import RequestRecord

STATS = ("mean", "median", "std", "p90", "p99", "min", "max")


def percentile(ordered: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile of an already sorted sequence (0 when empty)."""
    if not ordered:
        return 0.0
    rank = p / 100.0 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Iterable[float], name: str, scale: float = 1000.0) -> dict[str, float]:
    """``{mean,median,std,p90,p99,min,max}_<name>_ms`` of ``values`` (seconds, scaled to ms)."""
    ordered = sorted(v * scale for v in values)
    n = len(ordered)
    mean = sum(ordered) / n if n else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in ordered) / n) if n else 0.0
    figures = {
        "mean": mean,
        "median": percentile(ordered, 50),
        "std": std,
        "p90": percentile(ordered, 90),
        "p99": percentile(ordered, 99),
        "min": ordered[0] if n else 0.0,
        "max": ordered[-1] if n else 0.0,
    }
    return {f"{stat}_{name}_ms": figures[stat] for stat in STATS}


def tpot(rec: RequestRecord) -> float | None:
    if rec.output_tokens <= 1:
        return None
    return (rec.latency - rec.ttft) / (rec.output_tokens - 1)


def chunk_gaps(rec: RequestRecord) -> list[float]:
    times = rec.chunk_times
    return [times[i] - times[i - 1] for i in range(1, len(times))]


def token_gaps(rec: RequestRecord) -> list[float]:
    """Per-token ITL samples: a chunk of k tokens after a gap g gives k samples of g / k."""
    out: list[float] = []
    times, tokens = rec.chunk_times, rec.chunk_tokens
    mean_per_chunk = rec.output_tokens / len(times) if times else 1.0
    for i in range(1, len(times)):
        gap = times[i] - times[i - 1]
        k = tokens[i]
        if k is None:
            out.append(gap / mean_per_chunk if mean_per_chunk > 0 else gap)
        elif k > 0:
            out.extend([gap / k] * k)
    return out


def is_good(
    rec: RequestRecord, slo_ttft_ms: float, slo_tpot_ms: float, slo_e2el_ms: float = 0.0
) -> bool:
    """Within every SLO that is set (vLLM's goodput rule: TPOT of a 1-token request is 0)."""
    if slo_ttft_ms and rec.ttft * 1000.0 > slo_ttft_ms:
        return False
    if slo_e2el_ms and rec.latency * 1000.0 > slo_e2el_ms:
        return False
    per_token = tpot(rec) or 0.0
    return not (slo_tpot_ms and per_token * 1000.0 > slo_tpot_ms)


def peak_output_rate(records: Sequence[RequestRecord]) -> float:
    """Most output tokens received in any one-second bucket, as tokens/s."""
    buckets: dict[int, float] = {}
    if not records:
        return 0.0
    origin = min(r.start for r in records)
    for rec in records:
        mean = rec.output_tokens / len(rec.chunk_times)
        for t, k in zip(rec.chunk_times, rec.chunk_tokens, strict=True):
            second = int(t - origin)
            buckets[second] = buckets.get(second, 0.0) + (mean if k is None else k)
    return float(max(buckets.values())) if buckets else 0.0


def vllm_peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """vLLM's (max_output_tokens_per_s, max_concurrent_requests): one token per chunk and every
    request active in a one-second bucket, counted from the earliest start (serve.py)."""
    if not records:
        return 0.0, 0
    origin = min(r.start for r in records)
    tokens: Counter[int] = Counter()
    active: Counter[int] = Counter()
    for rec in records:
        for t in rec.chunk_times:
            tokens[int(t - origin)] += 1
        for second in range(int(rec.start - origin), int(rec.chunk_times[-1] - origin) + 1):
            active[second] += 1
    return float(max(tokens.values(), default=0)), max(active.values(), default=0)


def detailed(records: Sequence[RequestRecord], origin: float) -> dict[str, list[Any]]:
    """vLLM's per-request arrays (``--save-detailed``), in request order."""
    ordered = sorted(records, key=lambda r: r.index)
    return {
        "input_lens": [
            r.prompt_tokens if r.prompt_tokens is not None else r.input_len for r in ordered
        ],
        "output_lens": [r.output_tokens if r.ok else 0 for r in ordered],
        "ttfts": [r.ttft if r.ok else 0.0 for r in ordered],
        "itls": [chunk_gaps(r) if r.ok else [] for r in ordered],
        "start_times": [r.start - origin for r in ordered],
        "generated_texts": ["".join(r.text or []) for r in ordered],
        "errors": ["" if r.ok else f"{r.error_kind}: {r.error}" for r in ordered],
    }


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at once, from a sweep over [start, end) intervals."""
    edges = sorted([(r.start, 1) for r in records] + [(r.end, -1) for r in records])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def lengths(values: Sequence[int | None], name: str) -> dict[str, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {f"min_{name}": None, f"mean_{name}": None, f"max_{name}": None}
    return {
        f"min_{name}": min(known),
        f"mean_{name}": sum(known) / len(known),
        f"max_{name}": max(known),
    }


def summarize(
    records: Sequence[RequestRecord],
    duration: float,
    slo_ttft_ms: float,
    slo_tpot_ms: float,
    slo_e2el_ms: float = 0.0,
    percentiles: Sequence[float] = (),
    percentile_metrics: Sequence[str] = (),
) -> dict[str, Any]:
    """The figures of one point from its measured records (warm-up already left out).
    ``percentiles`` add ``p<X>_<metric>_ms`` for each of ``percentile_metrics`` (default
    ttft, tpot, itl: vLLM's ``--metric-percentiles`` / ``--percentile-metrics``)."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    per = duration if duration > 0 else math.inf
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens if r.prompt_tokens is not None else r.input_len for r in ok)
    slo = bool(slo_ttft_ms or slo_tpot_ms or slo_e2el_ms)
    good = sum(1 for r in ok if is_good(r, slo_ttft_ms, slo_tpot_ms, slo_e2el_ms))
    tpots = [t for t in (tpot(r) for r in ok) if t is not None]
    itl_chunk = [g for r in ok for g in chunk_gaps(r)]
    itl_token = [g for r in ok for g in token_gaps(r)]
    sources = Counter(r.token_source for r in ok)
    lags = [r.start - r.scheduled for r in records]
    ordered = sorted(records, key=lambda r: r.index)
    queue = {id(r): r.queue_time for r in records}
    peak_tokens, peak_active = vllm_peaks(ok)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(failed),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / per,
        "request_goodput": good / per if slo else None,
        "good_requests": good if slo else None,
        "output_throughput": out_tokens / per,
        "total_token_throughput": (in_tokens + out_tokens) / per,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_active,
        "rtfx": 0.0,  # vLLM's inverse real-time factor, for audio input only
        "latencies": [r.latency if r.ok else 0.0 for r in ordered],
        "queue_times": [queue[id(r)] for r in ordered],
        "max_output_tokens_per_s_by_usage": peak_output_rate(ok),
        "max_in_flight_requests": peak_concurrency(records),
        "errors_by_kind": dict(Counter(r.error_kind or "" for r in failed)),
        "error_samples": [f"{r.error_kind}: {r.error}" for r in failed[:10]],
        "token_count_source": dict(sources),
        "itl_samples": len(itl_chunk),
        "itl_per_token_samples": len(itl_token),
        **distribution((r.ttft for r in ok), "ttft"),
        **distribution(tpots, "tpot"),
        **distribution(itl_chunk, "itl"),
        **distribution(itl_token, "itl_per_token"),
        **distribution((r.latency for r in ok), "e2el"),
        **distribution(lags, "dispatch_lag"),
        **distribution(queue.values(), "client_queue_time"),
        **distribution((r.latency + queue[id(r)] for r in ok), "e2el_including_client_queue"),
        **distribution((r.dispatched - r.start for r in ok), "send_delay"),
        **lengths([r.input_len for r in records], "input_len_requested"),
        **lengths([r.prompt_tokens for r in ok], "input_tokens"),
        **lengths([r.max_tokens for r in records], "output_len_requested"),
        **lengths([r.output_tokens for r in ok], "output_tokens"),
    }
    if percentiles:
        samples = {
            "ttft": [r.ttft for r in ok],
            "tpot": tpots,
            "itl": itl_chunk,
            "e2el": [r.latency for r in ok],
            "client_queue_time": list(queue.values()),
            "e2el_including_client_queue": [r.latency + queue[id(r)] for r in ok],
        }
        for metric in percentile_metrics or ("ttft", "tpot", "itl"):
            ordered_ms = sorted(v * 1000.0 for v in samples[metric])
            for p in percentiles:
                result[f"p{p:g}_{metric}_ms"] = percentile(ordered_ms, p)
    return result


def breakdowns(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """TTFT and TPOT by turn (multi-turn) and by prefix group, where the dataset has them:
    ``by_turn`` / ``by_prefix_group``, keyed by the turn or group as a string."""
    out: dict[str, Any] = {}
    for name, key in (("by_turn", "turn"), ("by_prefix_group", "group")):
        groups: dict[int, list[RequestRecord]] = {}
        for rec in records:
            value = getattr(rec, key)
            if value is not None:
                groups.setdefault(value, []).append(rec)
        if groups:
            out[name] = {str(k): _slice(groups[k]) for k in sorted(groups)}
    return out


def _slice(records: list[RequestRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    ttfts = sorted(r.ttft * 1000.0 for r in ok)
    tpots = sorted(t * 1000.0 for t in (tpot(r) for r in ok) if t is not None)
    prompt = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    return {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "mean_ttft_ms": sum(ttfts) / len(ttfts) if ttfts else None,
        "median_ttft_ms": percentile(ttfts, 50) if ttfts else None,
        "p99_ttft_ms": percentile(ttfts, 99) if ttfts else None,
        "mean_tpot_ms": sum(tpots) / len(tpots) if tpots else None,
        "median_tpot_ms": percentile(tpots, 50) if tpots else None,
        "p99_tpot_ms": percentile(tpots, 99) if tpots else None,
        "mean_input_tokens": sum(prompt) / len(prompt) if prompt else None,
    }
