"""Calls to agents in flight on their own: at most one per key (a host's poll, an attempt's
call), each bounded by its own gRPC deadline. The control loop starts what is not already in
flight and never waits for an answer, so a hung or slow host delays only its own keys.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger(__name__)
T = TypeVar("T")
C = TypeVar("C")


def poll_key(host: str) -> str:
    return f"poll:{host}"


def attempt_key(attempt_id: str) -> str:
    return f"attempt:{attempt_id}"


class InFlight:
    """A pool of agent calls keyed so that one key never has two calls at once."""

    def __init__(
        self, workers: int, name: str = "agent-call", clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def start(self, key: str, work: Callable[[], None]) -> bool:
        """Run ``work`` on the pool unless ``key`` is in flight; False if it was."""
        with self._lock:
            if key in self._running:
                return False
            self._running.add(key)
        try:
            self._pool.submit(self._run, key, work)
        except RuntimeError:  # the pool is shut down: the controller is stopping
            self.done(key)
            return False
        return True

    def start_calls(
        self,
        calls: Sequence[tuple[str, C]],
        issue: Callable[[list[C]], list[Future[T]]],
        then: Callable[[list[Answer[C, T]]], None],
    ) -> int:
        """Issue many calls at once (``issue`` gets the contexts of those not already in
        flight, and returns their futures in order; no thread waits on them). As they
        complete, ``then`` gets the answers in batches, one batch at a time on the pool: a wave
        of 200 StartRun answers costs a few store commits, not one or two per answer. A key
        stays in flight until its batch is handled. Returns how many calls were issued."""
        keys: list[str] = []
        contexts: list[C] = []
        with self._lock:
            for key, context in calls:
                if key in self._running:
                    continue
                self._running.add(key)
                keys.append(key)
                contexts.append(context)
        if not keys:
            return 0
        try:
            futures = issue(contexts)
        except Exception:  # building the calls failed (a bug, or stopping): the keys are freed
            log.exception("agent_call_failed", keys=keys[:10])
            for key in keys:
                self.done(key)
            return 0
        answers: _Answers[C, T] = _Answers(self, then)
        for key, context, future in zip(keys, contexts, futures, strict=True):
            future.add_done_callback(partial(answers.add, key, context))
        return len(keys)

    def busy(self, key: str) -> bool:
        with self._lock:
            return key in self._running

    def count(self) -> int:
        with self._lock:
            return len(self._running)

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is in flight (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, key: str, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # one failed call must not stop the others; logged in full
            log.exception("agent_call_failed", key=key)
        finally:
            self.done(key)

    def clock(self) -> float:
        return self._clock()

    def submit(self, work: Callable[[], None]) -> None:
        self._pool.submit(work)

    def done(self, key: str) -> None:
        with self._idle:
            self._running.discard(key)
            if not self._running:
                self._idle.notify_all()


@dataclass(frozen=True)
class Answer(Generic[C, T]):
    context: C
    future: Future[T]
    answered_at: float


class _Answers(Generic[C, T]):
    """Answers of one ``start_calls``, gathered while the previous batch is being handled."""

    def __init__(self, calls: InFlight, then: Callable[[list[Answer[C, T]]], None]) -> None:
        self._calls = calls
        self._then = then
        self._lock = threading.Lock()
        self._pending: list[tuple[str, Answer[C, T]]] = []
        self._draining = False

    def add(self, key: str, context: C, future: Future[T]) -> None:
        """On gRPC's thread: note the answer and its time; start a drain if none runs."""
        with self._lock:
            self._pending.append((key, Answer(context, future, self._calls.clock())))
            if self._draining:
                return
            self._draining = True
        try:
            self._calls.submit(self._drain)
        except RuntimeError:  # shut down meanwhile
            with self._lock:
                dropped, self._pending = self._pending, []
            for key_, _ in dropped:
                self._calls.done(key_)

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._draining = False
                    return
            try:
                self._then([answer for _, answer in batch])
            except Exception:  # a bug in handling must not keep the keys in flight forever
                log.exception("agent_call_failed", keys=[key for key, _ in batch][:10])
            finally:
                for key, _ in batch:
                    self._calls.done(key)
