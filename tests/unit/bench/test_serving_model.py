"""The simulator's serving model (continuous batching) on a virtual clock: every chunk's time
against the formula, for queueing on --max-num-seqs and on --kv-cache-tokens, chunked prefill,
an idle engine woken by an arrival, and a cancelled request freeing its slot. Also: the flags,
and a spec's ``server.flags.--max-num-seqs`` reaching the simulator's settings."""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
from collections.abc import Callable

import pytest

from tunelab.agent.engines.failures import COMMON_SIGNATURES, FailureReason, classify_lines
from tunelab.bench.simulator.app import oom_lines
from tunelab.bench.simulator.batching import BatchEngine
from tunelab.bench.simulator.metrics import SimMetrics
from tunelab.bench.simulator.options import (
    SimSettings,
    add_sim_arguments,
    launch_factor,
    settings_from_args,
)
from tunelab.bench.simulator.timing import LatenessStats
from tunelab.controller.spec.expand import expand_text
from tunelab.controller.spec.render import server_argv

MS = 1e-3


class VirtualScheduler:
    """``at(when, callback)`` on a virtual clock: ``run()`` fires everything in time order."""

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0

    def at(self, when: float, callback: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, callback))

    def run(self, until: float = math.inf) -> None:
        while self.heap and self.heap[0][0] <= until:
            when, _, callback = heapq.heappop(self.heap)
            self.now = max(self.now, when)
            callback()
        self.now = max(self.now, until) if until != math.inf else self.now


class FakeGeneration:
    """A request as the engine sees it; records when each of its chunks was due."""

    def __init__(self, arrival: float, prompt: int, output: int, per_chunk: int = 1) -> None:
        self.arrival = arrival
        self.prompt = prompt
        self.total = output
        self.per_chunk = per_chunk
        self.chunks = math.ceil(output / per_chunk)
        self.done = False
        self.times: list[float] = []
        self.was_admitted = False
        self.metrics: SimMetrics | None = None  # the real generation drops its gauge when done

    @property
    def prompt_work(self) -> int:
        return max(1, self.prompt)

    @property
    def kv_tokens(self) -> int:
        return self.prompt + self.total

    def admitted(self) -> None:
        self.was_admitted = True

    def step_chunk(self, deadline: float) -> None:
        self.times.append(deadline)
        if len(self.times) == self.chunks:
            self.done = True
            if self.metrics is not None:
                self.metrics.running -= 1


def engine(**flags: float) -> tuple[BatchEngine, VirtualScheduler, SimMetrics]:
    settings = SimSettings(**flags)  # type: ignore[arg-type]
    assert settings.batching
    sched = VirtualScheduler()
    metrics = SimMetrics("m", LatenessStats())
    return BatchEngine(settings, sched, metrics), sched, metrics


def submit(eng: BatchEngine, sched: VirtualScheduler, gen: FakeGeneration) -> FakeGeneration:
    sched.run(until=gen.arrival)  # the engine sees it when it arrives
    gen.metrics = eng.metrics
    eng.submit(gen)  # FakeGeneration is a BatchedRequest
    return gen


def gate(eng: BatchEngine, sched: VirtualScheduler) -> float:
    """A one-token request at 0 that holds the engine for its first step, so the requests that
    arrive during it (at 1 ms) start together; returns when that step ends."""
    g = submit(eng, sched, FakeGeneration(0.0, prompt=1, output=1))
    sched.run(until=1 * MS)
    assert not g.times
    return eng.base + eng.per_seq + eng.per_prefill_token


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) < 1e-9 for x, y in zip(a, b, strict=True))


def test_one_request_prefills_in_one_step_then_decodes_one_chunk_per_step() -> None:
    b, s, p = 20.0, 1.0, 0.05
    eng, sched, _ = engine(step_ms_base=b, step_ms_per_seq=s, prefill_ms_per_token=p)
    gen = submit(eng, sched, FakeGeneration(arrival=1.0, prompt=100, output=5))
    sched.run()
    first = 1.0 + (b + s + p * 100) * MS
    assert close(gen.times, [first + j * (b + s) * MS for j in range(5)])


def test_max_num_seqs_makes_waves_and_the_rest_wait() -> None:
    b, s, p, n, c, prompt, out = 10.0, 0.5, 0.01, 3, 8, 40, 4
    eng, sched, metrics = engine(
        max_num_seqs=n, step_ms_base=b, step_ms_per_seq=s, prefill_ms_per_token=p
    )
    start = gate(eng, sched)
    gens = [submit(eng, sched, FakeGeneration(1 * MS, prompt, out)) for _ in range(c)]
    assert (metrics.running, metrics.waiting) == (1, 8)  # the gate's step is in flight
    sched.run(until=start)
    assert (metrics.running, metrics.waiting) == (3, 5)  # counted as vLLM's gauges would
    sched.run()
    for w in range(math.ceil(c / n)):
        wave = gens[w * n : (w + 1) * n]
        k = len(wave)
        prefill = (b + s * k + p * prompt * k) * MS
        decode = (b + s * k) * MS
        for gen in wave:
            assert close(gen.times, [start + prefill + j * decode for j in range(out)]), w
        start += prefill + (out - 1) * decode


def test_kv_cache_admits_only_what_fits_with_its_whole_output() -> None:
    prompt, out = 30, 10
    eng, sched, _ = engine(kv_cache_tokens=2 * (prompt + out) + 5, step_ms_base=10.0)
    start = gate(eng, sched)
    gens = [submit(eng, sched, FakeGeneration(1 * MS, prompt, out)) for _ in range(5)]
    sched.run()
    step = 10.0 * MS
    for i, gen in enumerate(gens):  # waves of 2: wave w starts after w·out steps
        wave_start = start + (i // 2) * out * step
        assert close(gen.times, [wave_start + (j + 1) * step for j in range(out)]), i
    assert eng.refusal(100) is not None and eng.refusal(85) is None


def test_chunked_prefill_raises_the_decoders_itl_and_delays_the_long_prompt() -> None:
    b, s, p, t = 10.0, 1.0, 0.1, 100
    eng, sched, _ = engine(
        step_ms_base=b, step_ms_per_seq=s, prefill_ms_per_token=p, max_num_batched_tokens=t
    )
    short = submit(eng, sched, FakeGeneration(0.0, prompt=10, output=8))
    # arrives during short's first step; its 250-token prompt needs chunks of 100, 100, 50
    long = submit(eng, sched, FakeGeneration(0.5 * MS, prompt=250, output=2))
    sched.run()
    d1 = b + s + p * 10  # short's prefill, alone
    chunks = [b + 2 * s + p * 100, b + 2 * s + p * 100, b + 2 * s + p * 50]
    expected_short = [d1]
    for d in chunks:
        expected_short.append(expected_short[-1] + d)
    for _ in range(8 - len(expected_short)):
        expected_short.append(expected_short[-1] + b + s * (2 if len(expected_short) < 5 else 1))
    assert close(short.times, [x * MS for x in expected_short])
    assert close(long.times, [x * MS for x in (expected_short[3], expected_short[4])])


def test_an_idle_engine_starts_at_the_arrival_and_an_arrival_mid_step_waits() -> None:
    eng, sched, _ = engine(step_ms_base=10.0, max_num_seqs=4)
    first = submit(eng, sched, FakeGeneration(2.0, prompt=1, output=1))
    sched.run()
    assert close(first.times, [2.010])
    late = submit(eng, sched, FakeGeneration(5.0, prompt=1, output=3))
    mid = submit(eng, sched, FakeGeneration(5.004, prompt=1, output=1))
    sched.run()
    assert close(late.times, [5.010, 5.020, 5.030])
    assert close(mid.times, [5.020])  # joined at the step that began after it arrived


def test_a_cancelled_request_frees_its_slot_for_the_next_step() -> None:
    eng, sched, metrics = engine(step_ms_base=10.0, max_num_seqs=1)
    gone = submit(eng, sched, FakeGeneration(0.0, prompt=1, output=100))
    nxt = submit(eng, sched, FakeGeneration(0.0, prompt=1, output=1))
    sched.run(until=0.035)
    gone.done = True  # the client went away after 3 chunks
    sched.run()
    assert len(gone.times) == 3
    assert close(nxt.times, [0.050])  # the step in flight ends at 40 ms, then nxt's at 50
    assert eng.kv_reserved == 0 and not eng.running and not eng.busy
    assert metrics.running == 1  # ``gone`` was dropped by hand here, not by its generation


def parse(*argv: str) -> SimSettings:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    return settings_from_args(parser.parse_args(["--port", "0", *argv]))


def test_without_the_flags_it_is_the_fixed_schedule() -> None:
    assert not parse().batching
    assert not parse("--oom-above-seqs", "64").batching
    settings = parse("--max-num-seqs", "128", "--oom-above-seqs", "64", "--itl-ms", "7")
    assert settings.batching and settings.fails_with_oom and settings.step_base_ms == 7.0
    assert not parse("--max-num-seqs", "64", "--oom-above-seqs", "64").fails_with_oom
    with pytest.raises(SystemExit):
        parse("--max-num-seqs", "0")


def test_the_oom_line_is_what_the_agent_calls_cuda_oom() -> None:
    failure = classify_lines(
        oom_lines(parse("--max-num-seqs", "256", "--oom-above-seqs", "64")), COMMON_SIGNATURES
    )
    assert failure is not None and failure.reason == FailureReason.CUDA_OOM
    assert "CUDA out of memory" in failure.line


SPEC = """
name: sim-seqs
host: {labels: {pool: demo}}
server:
  command: ["{python}", -P, -m, tunelab.bench.simulator]
  flags: {--port: "{port}", --step-ms-base: 8, --kv-cache-tokens: 65536}
  port: auto
  ready: {path: /health, model: tunelab-sim}
benchmark: {concurrency: [1], requests: 4, input_len: 8, output_len: 8}
matrix:
  server.flags.--max-num-seqs: [16, 64]
  server.flags.--max-num-batched-tokens: [512]
"""


def test_a_specs_server_flags_reach_the_simulator() -> None:
    seen = []
    for experiment in expand_text(SPEC):
        argv = server_argv(experiment.spec)
        flags = [
            a.replace("{port}", "0") for a in argv[argv.index("tunelab.bench.simulator") + 1 :]
        ]
        parser = argparse.ArgumentParser()
        add_sim_arguments(parser)
        settings = settings_from_args(parser.parse_args(flags))
        seen.append((settings.max_num_seqs, settings.max_num_batched_tokens))
        assert settings.step_ms_base == 8.0 and settings.kv_cache_tokens == 65536
    assert sorted(seen) == [(16, 512), (64, 512)]


def test_requests_arriving_at_the_same_instant_share_the_first_step() -> None:
    eng, sched, _ = engine(step_ms_base=10.0, step_ms_per_seq=1.0)
    sched.run(until=1.0)
    gens = [FakeGeneration(1.0, prompt=1, output=2) for _ in range(3)]
    for gen in gens:  # before the loop runs the callbacks due at 1.0
        eng.submit(gen)
    sched.run()
    for gen in gens:
        assert close(gen.times, [1.013, 1.026])


def test_launch_cv_scales_every_time_by_one_factor_per_launch() -> None:
    plain = parse("--step-ms-base", "10", "--step-ms-per-seq", "0.5", "--itl-ms", "4")
    assert (plain.step_ms_base, plain.step_ms_per_seq, plain.itl_ms) == (10.0, 0.5, 4.0)
    args = ("--step-ms-base", "10", "--step-ms-per-seq", "0.5", "--launch-cv", "0.1")
    one = parse(*args, "--launch-seed", "7")
    again = parse(*args, "--launch-seed", "7")
    assert one == again, "a seed makes the launch reproducible"
    factor = (one.step_ms_base or 0.0) / 10.0
    assert factor != 1.0 and one.step_ms_per_seq == pytest.approx(0.5 * factor)
    assert one.ttft_ms == pytest.approx(50.0 * factor)
    draws = [launch_factor(0.1, seed) for seed in range(4000)]
    mean = statistics.fmean(draws)
    assert mean == pytest.approx(1.0, abs=0.01)
    assert statistics.stdev(draws) / mean == pytest.approx(0.1, abs=0.01)
    assert launch_factor(0.0, None) == 1.0
