"""The simulator's vLLM-style ``/metrics``: plain counters updated inline, rendered at scrape time.

Names and histogram buckets follow vLLM's (``vllm:num_requests_running``,
``vllm:generation_tokens_total``, ``vllm:time_to_first_token_seconds``, ...), so the agent's
scraper and dashboards see the same series from the simulator as from a real engine. Observing a
histogram is one ``bisect`` and an increment: no locks, the event loop is the only writer.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tunelab.bench.simulator.phases import Script
from tunelab.bench.simulator.timing import LatenessStats

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
LATENESS_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)


class Histogram:
    """Cumulative-bucket histogram with the +Inf bucket last."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


class SimMetrics(Collector):
    """Everything ``/metrics`` shows, updated by the generation streams."""

    def __init__(
        self,
        model: str,
        lateness: LatenessStats,
        script: Script | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.script = script or Script(())
        self.clock = clock
        self.lateness = lateness
        self.running = 0
        self.waiting = 0  # requests queued for a batch slot (the serving model only)
        self.kv_usage = 0.0  # share of --kv-cache-tokens held (the serving model only)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        # the server's own window (event-loop clock): the first arrival of a request that got
        # tokens, and the last token written; /sim/stats reports tokens over it
        self.first_arrival = math.inf
        self.last_token = 0.0
        self.finished: dict[str, int] = {"length": 0, "stop": 0, "abort": 0}
        self.errors_injected: dict[str, int] = {}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def served(self, arrival: float, now: float) -> None:
        self.first_arrival = min(self.first_arrival, arrival)
        self.last_token = now

    def window(self) -> dict[str, float]:
        """Output tokens and the seconds from the first arrival to the last token written."""
        seconds = max(0.0, self.last_token - self.first_arrival) if self.last_token else 0.0
        return {"tokens": self.generation_tokens, "seconds": seconds}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _hist(self, name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=["model_name"])
        family.add_metric([self.model], hist.buckets(), hist.total)
        return family

    def collect(self) -> Iterator[Metric]:
        labels = ["model_name"]
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Requests being generated.", labels=labels
        )
        running.add_metric([self.model], self.running)
        yield running
        now = self.clock()
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Requests waiting for a batch slot.", labels=labels
        )
        waiting.add_metric([self.model], self.waiting + self.script.extra_waiting(now))
        yield waiting
        kv = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full.", labels=labels
        )
        kv.add_metric([self.model], 1.0 if self.script.cache_full(now) else self.kv_usage)
        yield kv
        preempted = CounterMetricFamily(
            "vllm:num_preemptions", "Requests preempted (scripted phases only).", labels=labels
        )
        preempted.add_metric([self.model], self.script.preemptions(now))
        yield preempted
        prompt = CounterMetricFamily(
            "vllm:prompt_tokens", "Prompt tokens processed.", labels=labels
        )
        prompt.add_metric([self.model], self.prompt_tokens)
        yield prompt
        generation = CounterMetricFamily(
            "vllm:generation_tokens", "Generation tokens produced.", labels=labels
        )
        generation.add_metric([self.model], self.generation_tokens)
        yield generation
        success = CounterMetricFamily(
            "vllm:request_success",
            "Finished requests by finish reason.",
            labels=["model_name", "finished_reason"],
        )
        for reason, count in sorted(self.finished.items()):
            success.add_metric([self.model, reason], count)
        yield success
        yield self._hist(
            "vllm:time_to_first_token_seconds", "Time to first token (server side).", self.ttft
        )
        yield self._hist(
            "vllm:inter_token_latency_seconds", "Time between streamed chunks.", self.itl
        )
        yield self._hist("vllm:e2e_request_latency_seconds", "Request latency.", self.e2e)
        injected = CounterMetricFamily(
            "tunelab_sim_faults_injected", "Requests given an injected fault.", labels=["kind"]
        )
        for kind, count in sorted(self.errors_injected.items()):
            injected.add_metric([kind], count)
        yield injected
        late = Histogram(LATENESS_BUCKETS)
        for index, count in enumerate(self.lateness.counts):
            if count:
                late.counts[
                    bisect.bisect_left(LATENESS_BUCKETS, index * LatenessStats.BIN_SECONDS)
                ] += count
        late.total = self.lateness.total
        lateness = HistogramMetricFamily(
            "tunelab_sim_write_lateness_seconds",
            "How long after its deadline each chunk was written.",
        )
        lateness.add_metric([], late.buckets(), late.total)
        yield lateness
