"""Continuous batching: a step loop that decides when every request's chunks go out.

Used when any serving-model flag is given (``--max-num-seqs``, ``--step-ms-base``, ...); without
them the simulator keeps its fixed ``TTFT + j·ITL`` schedule. The model, in virtual time:

* The engine runs one step after another while it has work. A step starting at ``s`` takes
  ``B + S·n + P·p`` ms: ``n`` requests hold a sequence slot in it, ``p`` prompt tokens are
  prefilled in it.
* At the start of a step, every admitted request whose prompt is done decodes: at the end of the
  step it gets one chunk of ``--tokens-per-chunk`` tokens. Then, first come first served, the
  request whose prompt is part-done, then waiting requests that arrived by ``s``, get prompt
  chunks from a budget of ``T`` tokens per step (``--max-num-batched-tokens``; decodes do not
  draw on it). A waiting request is admitted only while fewer than ``N`` hold a slot and its KV
  (prompt + all of its output tokens, reserved at admission, so nothing is ever preempted) fits
  in ``K``; the head of the queue that does not fit holds back the ones behind it.
* The step that finishes a request's prompt also produces its first chunk (as vLLM's does).
* A finished or cancelled request frees its slot and KV for the next step. A step starts at the
  end of the previous one, or, when the engine was idle, at the arrival of the request that
  woke it (with every request that arrived at that same instant).

All times are computed from arrivals and step ends, never from when a callback happened to run,
so one late write delays nothing after it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tunelab.bench.simulator.metrics import SimMetrics
from tunelab.bench.simulator.options import SimSettings


class Scheduler(Protocol):
    """Runs a callback at a loop time (``timing.DeadlineScheduler``; a virtual clock in tests)."""

    def at(self, when: float, callback: Callable[[], None]) -> None: ...


class BatchedRequest(Protocol):
    """What the engine needs of a generation (``engine.Generation`` implements it)."""

    arrival: float
    done: bool
    chunks: int  # output chunks in all
    total: int  # output tokens in all
    per_chunk: int  # output tokens per chunk (the last one the rest)

    @property
    def prompt_work(self) -> int: ...  # prompt tokens to prefill (at least 1)

    @property
    def kv_tokens(self) -> int: ...  # prompt + output tokens it will hold

    def step_chunk(self, deadline: float) -> None: ...  # its next chunk is due at ``deadline``

    def admitted(self) -> None: ...  # it left the queue for a slot


@dataclass
class _Slot:
    gen: BatchedRequest
    prefill_left: int
    chunks_left: int
    kv: int


@dataclass
class StepStats:
    steps: int = 0
    busy_seconds: float = 0.0  # sum of step durations: the simulated GPU's busy time
    prefill_tokens: int = 0
    max_running: int = 0
    durations_ms: list[float] = field(default_factory=list)  # the last few, for /sim/stats

    def add(self, duration: float, running: int, prefill: int) -> None:
        self.steps += 1
        self.busy_seconds += duration
        self.prefill_tokens += prefill
        self.max_running = max(self.max_running, running)
        self.durations_ms.append(duration * 1000.0)
        if len(self.durations_ms) > 16:
            del self.durations_ms[0]


class BatchEngine:
    """The step loop of one simulated engine, on the simulator's deadline scheduler."""

    def __init__(self, settings: SimSettings, scheduler: Scheduler, metrics: SimMetrics) -> None:
        self.scheduler = scheduler
        self.metrics = metrics
        self.max_seqs = settings.max_num_seqs or math.inf
        self.budget = settings.max_num_batched_tokens or math.inf
        self.kv_capacity = settings.kv_cache_tokens or math.inf
        self.base = settings.step_base_ms / 1000.0
        self.per_seq = settings.step_per_seq_ms / 1000.0
        self.per_prefill_token = settings.prefill_per_token_ms / 1000.0
        self.waiting: deque[_Slot] = deque()
        self.running: list[_Slot] = []
        self.kv_reserved = 0
        self.busy = False
        self.last_end = -math.inf
        self.stats = StepStats()

    # the front door ---------------------------------------------------------------------------
    def refusal(self, kv_tokens: int) -> str | None:
        """Why a request can never run here (it needs more KV than there is), else None."""
        if kv_tokens > self.kv_capacity:
            return (
                f"this request needs {kv_tokens} tokens of KV cache (prompt + max_tokens), "
                f"more than --kv-cache-tokens {int(self.kv_capacity)}"
            )
        return None

    def submit(self, gen: BatchedRequest) -> None:
        self.waiting.append(_Slot(gen, gen.prompt_work, gen.chunks, gen.kv_tokens))
        self.metrics.waiting += 1
        if not self.busy:
            # The step begins at the arrival, composed once the callbacks already due have run,
            # so requests that arrive at the same instant start together.
            self.busy = True
            start = max(gen.arrival, self.last_end)
            self.scheduler.at(start, lambda: self._begin(start))

    def kv_used(self) -> int:
        """Tokens of KV that running requests hold now (prefilled prompt + generated)."""
        used = 0
        for slot in self.running:
            gen = slot.gen
            prompt = min(gen.prompt_work - slot.prefill_left, gen.kv_tokens - gen.total)
            used += prompt + min(gen.total, gen.per_chunk * (gen.chunks - slot.chunks_left))
        return used

    # the loop ---------------------------------------------------------------------------------
    def _release_cancelled(self) -> None:
        kept = []
        for slot in self.running:
            if slot.gen.done:
                self.kv_reserved -= slot.kv
            else:
                kept.append(slot)
        self.running = kept
        while self.waiting and self.waiting[0].gen.done:
            self.waiting.popleft()  # its counter was dropped by the generation itself

    def _begin(self, start: float) -> None:
        """Compose the step that starts at ``start`` and schedule its end (or go idle)."""
        self._release_cancelled()
        outputs = [slot for slot in self.running if slot.prefill_left == 0]
        budget = self.budget
        prefill = 0
        for slot in self.running:  # the part-done prompt first (at most one)
            if slot.prefill_left > 0 and budget > 0:
                take = int(min(slot.prefill_left, budget))
                slot.prefill_left -= take
                budget -= take
                prefill += take
                if slot.prefill_left == 0:
                    outputs.append(slot)
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            head = self.waiting[0]
            if head.gen.done:
                self.waiting.popleft()
                continue
            if head.gen.arrival > start or self.kv_reserved + head.kv > self.kv_capacity:
                break
            self.waiting.popleft()
            self.metrics.waiting -= 1
            self.metrics.running += 1
            head.gen.admitted()
            self.running.append(head)
            self.kv_reserved += head.kv
            take = int(min(head.prefill_left, budget))
            head.prefill_left -= take
            budget -= take
            prefill += take
            if head.prefill_left == 0:
                outputs.append(head)
        if not self.running:
            if self.waiting and self.waiting[0].gen.arrival > start:
                self._begin(self.waiting[0].gen.arrival)  # only when an arrival was reordered
                return
            self.busy = False
            return
        running = len(self.running)
        duration = self.base + self.per_seq * running + self.per_prefill_token * prefill
        duration *= self.metrics.script.slowdown(start)  # a scripted slow phase (phases.py)
        self.stats.add(duration, running, prefill)
        end = start + duration
        self.busy = True
        self.scheduler.at(end, lambda: self._end(end, outputs))

    def _end(self, end: float, outputs: list[_Slot]) -> None:
        self.last_end = end
        for slot in outputs:
            if not slot.gen.done:
                slot.chunks_left -= 1
                slot.gen.step_chunk(end)  # the last one finishes the generation
        kept = []
        for slot in self.running:
            if slot.gen.done or slot.chunks_left <= 0:
                self.kv_reserved -= slot.kv
            else:
                kept.append(slot)
        self.running = kept
        if self.running:
            self._begin(end)
        elif self.waiting:
            self._begin(max(end, self.waiting[0].gen.arrival))
        else:
            self.busy = False
        self.metrics.kv_usage = self.kv_used() / self.kv_capacity
