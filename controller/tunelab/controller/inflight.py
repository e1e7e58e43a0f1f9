"""Calls to agents in flight on their own: at most one per key (a host's poll, an attempt's
call), each bounded by its own gRPC deadline. The control loop starts what is not already in
flight and never waits for an answer, so a hung or slow host delays only its own keys.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import grpc
import structlog

log = structlog.get_logger(__name__)
T = TypeVar("T")


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
            self._done(key)
            return False
        return True

    def start_call(
        self,
        key: str,
        issue: Callable[[], grpc.Future[T]],
        then: Callable[[grpc.Future[T], float], None],
    ) -> bool:
        """Issue a gRPC call as a future now (no thread waits on it); when it completes,
        ``then(future, answered_at)`` runs on the pool. The key is in flight until then."""
        with self._lock:
            if key in self._running:
                return False
            self._running.add(key)
        try:
            future = issue()
        except Exception:  # building the call failed: a bug, logged; the key is freed
            log.exception("agent_call_failed", key=key)
            self._done(key)
            return False

        def answered(done: Any) -> None:
            work = partial(then, done, self._clock())
            try:
                self._pool.submit(self._run, key, work)
            except RuntimeError:  # shut down meanwhile
                self._done(key)

        future.add_done_callback(answered)
        return True

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
            self._done(key)

    def _done(self, key: str) -> None:
        with self._idle:
            self._running.discard(key)
            if not self._running:
                self._idle.notify_all()
