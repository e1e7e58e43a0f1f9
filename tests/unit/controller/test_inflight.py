"""Unit: calls in flight — one per key, and a call that hangs holds up no other key."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from tunelab.controller.inflight import Answer, InFlight


def test_one_call_per_key_and_a_hung_key_holds_up_no_other() -> None:
    calls = InFlight(4)
    release = threading.Event()
    duplicates: list[str] = []

    def hang() -> None:
        release.wait(10)

    try:
        assert calls.start("poll:hung", hang)
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


def test_future_calls_hold_their_keys_but_no_thread_and_answers_come_in_batches() -> None:
    calls = InFlight(1)
    answers: list[Future[str]] = [Future() for _ in range(3)]
    batches: list[list[tuple[str, str]]] = []
    gate = threading.Event()

    def record(batch: list[Answer[str, str]]) -> None:
        gate.wait(5)  # answers that come meanwhile wait for the next batch
        batches.append([(a.context, a.future.result()) for a in batch])

    wave = [(f"attempt:a{i}", f"a{i}") for i in range(3)]
    issued: list[list[str]] = []

    def issue(contexts: list[str]) -> list[Future[str]]:
        issued.append(contexts)
        return [answers[int(c[1:])] for c in contexts]

    try:
        assert calls.start_calls(wave, issue, record) == 3
        assert calls.start_calls(wave[:1], issue, record) == 0  # in flight: not issued again
        assert issued == [["a0", "a1", "a2"]]
        answers[0].set_result("started")
        answers[1].set_result("started")  # the first batch may or may not hold it
        answers[2].set_result("started")
        gate.set()
        assert calls.wait_idle(5)
        assert sorted(c for batch in batches for c, _ in batch) == ["a0", "a1", "a2"]
        assert 1 <= len(batches) <= 3 and not calls.busy("attempt:a0")
    finally:
        gate.set()
        calls.close()


def test_an_issue_that_raises_frees_every_key() -> None:
    calls = InFlight(1)

    def broken(contexts: list[str]) -> list[Future[str]]:
        raise RuntimeError("stopping")

    try:
        assert calls.start_calls([("attempt:a1", "a1"), ("attempt:a2", "a2")], broken, print) == 0
        assert not calls.busy("attempt:a1") and not calls.busy("attempt:a2")
    finally:
        calls.close()


def test_a_batch_that_raises_frees_its_keys() -> None:
    calls = InFlight(1)
    answer: Future[str] = Future()

    def broken(batch: list[Answer[str, str]]) -> None:
        raise RuntimeError("a bug in handling answers")

    try:
        assert calls.start_calls([("attempt:a1", "a1")], lambda contexts: [answer], broken)
        assert calls.busy("attempt:a1")
        other = threading.Event()
        assert calls.start("poll:h1", other.set)  # the only worker is free: nothing waits
        assert other.wait(5)
        answer.set_result("started")
        assert calls.wait_idle(5) and not calls.busy("attempt:a1")
    finally:
        calls.close()
