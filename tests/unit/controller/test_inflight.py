"""Unit: calls in flight — one per key, and a call that hangs holds up no other key."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from tunelab.controller.inflight import InFlight


def test_one_call_per_key_and_a_hung_key_holds_up_no_other() -> None:
    calls = InFlight(4)
    release = threading.Event()
    duplicates: list[str] = []
    try:
        assert calls.start("poll:hung", lambda: release.wait(10) and None)
        assert not calls.start("poll:hung", lambda: duplicates.append("second"))
        answered = threading.Event()
        assert calls.start("poll:ok", answered.set)
        assert answered.wait(5)  # while the hung one still waits
        assert calls.busy("poll:hung") and calls.count() == 1
        release.set()
        assert calls.wait_idle(5) and not duplicates
        assert calls.start("poll:hung", lambda: None)  # free again once it answered
    finally:
        release.set()
        calls.close()


def test_a_call_that_raises_frees_its_key() -> None:
    calls = InFlight(1)

    def broken() -> None:
        raise RuntimeError("a bug in one call")

    try:
        assert calls.start("attempt:a1", broken)
        assert calls.wait_idle(5) and not calls.busy("attempt:a1")
    finally:
        calls.close()


def test_a_future_call_holds_its_key_but_no_thread_until_answered() -> None:
    calls = InFlight(1)
    answer: Future[str] = Future()
    seen: list[tuple[str, float]] = []

    def record(future: Any, at: float) -> None:
        seen.append((future.result(), at))

    try:
        assert calls.start_call("attempt:a1", lambda: answer, record)  # type: ignore[arg-type,return-value]
        assert not calls.start_call("attempt:a1", lambda: answer, record)  # type: ignore[arg-type,return-value]
        other = threading.Event()
        assert calls.start("poll:h1", other.set)  # the only worker is free: nothing waits
        assert other.wait(5)
        answer.set_result("started")
        assert calls.wait_idle(5) and seen and seen[0][0] == "started"
    finally:
        calls.close()
