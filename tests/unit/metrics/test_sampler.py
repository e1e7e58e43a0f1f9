"""The sampler's schedule, error accounting and thread, with a fake clock and plain sources."""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from tunelab.agent.gpu import Cadence
from tunelab.agent.metrics.sampler import Sampler


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


class Source:
    """Records its cycles; raises what it is told to, per cadence."""

    def __init__(self, name: str = "src", cadences: frozenset[Cadence] | None = None) -> None:
        self.name = name
        self.cadences = cadences or frozenset(Cadence)
        self.calls: list[tuple[Cadence, float]] = []
        self.raises: dict[Cadence, BaseException] = {}
        self.clock: Clock | None = None

    def sample(self, cadence: Cadence) -> None:
        self.calls.append((cadence, self.clock.now if self.clock else 0.0))
        error = self.raises.get(cadence)
        if error is not None:
            raise error

    def count(self, cadence: Cadence) -> int:
        return sum(1 for c, _ in self.calls if c is cadence)


def make(source: Source, interval: float = 1.0, slow: float = 15.0) -> tuple[Sampler, Clock]:
    clock = Clock()
    source.clock = clock
    return Sampler([source], interval, slow, clock=clock), clock


def test_static_once_fast_every_interval_slow_every_slow_interval() -> None:
    source = Source()
    sampler, clock = make(source)
    dues = []
    for _ in range(31):
        dues.append(sampler.tick() - clock.now)
        clock.now += 1.0
    assert source.count(Cadence.STATIC) == 1
    assert source.count(Cadence.FAST) == 31
    assert source.count(Cadence.SLOW) == 3  # t = 0, 15, 30
    assert source.calls[:3] == [
        (Cadence.STATIC, 500.0),
        (Cadence.FAST, 500.0),
        (Cadence.SLOW, 500.0),
    ]
    assert all(0 < due <= 1.0 for due in dues)


def test_a_stalled_clock_skips_missed_ticks_instead_of_bursting() -> None:
    source = Source()
    sampler, clock = make(source)
    sampler.tick()
    clock.now += 10.5  # the process was stopped for 10 s
    sampler.tick()
    sampler.tick()  # nothing is due: no catch-up burst
    assert source.count(Cadence.FAST) == 2


def test_a_failing_static_read_is_retried_on_the_slow_tick_until_it_works() -> None:
    source = Source()
    source.raises[Cadence.STATIC] = OSError("driver not ready")
    sampler, clock = make(source)
    sampler.tick()
    clock.now += 15
    sampler.tick()
    del source.raises[Cadence.STATIC]
    clock.now += 15
    sampler.tick()
    clock.now += 15
    sampler.tick()
    assert source.count(Cadence.STATIC) == 3
    assert sampler.stats()[("src", Cadence.STATIC)].errors == 2
    assert sampler.age("src", Cadence.STATIC) == 15.0


def test_errors_are_counted_logged_sparingly_and_recovery_is_logged() -> None:
    source = Source()
    source.raises[Cadence.FAST] = ValueError("garbled line")
    sampler, clock = make(source)
    with capture_logs() as logs:
        for _ in range(12):
            sampler.tick()
            clock.now += 1
        del source.raises[Cadence.FAST]
        sampler.tick()
    stats = sampler.stats()[("src", Cadence.FAST)]
    assert stats.errors == 12 and not stats.failing
    failed = [e for e in logs if e["event"] == "metrics_sample_failed"]
    assert [e["errors"] for e in failed] == [1, 10]
    assert [e["event"] for e in logs].count("metrics_sample_recovered") == 1
    assert sampler.age("src", Cadence.FAST) == 0.0


def test_a_bug_in_a_source_is_not_swallowed() -> None:
    source = Source()
    source.raises[Cadence.FAST] = KeyError("a bug")
    sampler, _ = make(source)
    with pytest.raises(KeyError):
        sampler.tick()


def test_only_declared_cadences_run() -> None:
    source = Source(cadences=frozenset({Cadence.SLOW}))
    sampler, clock = make(source)
    for _ in range(3):
        sampler.tick()
        clock.now += 1
    assert {c for c, _ in source.calls} == {Cadence.SLOW}
    assert set(sampler.stats()) == {("src", Cadence.SLOW)}


def test_close_interrupts_the_wait_and_ends_the_thread() -> None:
    sampled = threading.Event()

    class Signalling(Source):
        def sample(self, cadence: Cadence) -> None:
            super().sample(cadence)
            sampled.set()

    source = Signalling()
    sampler = Sampler([source], interval=3600, slow_interval=3600)
    sampler.start()
    assert sampled.wait(10)  # the first tick ran; the thread now waits an hour for the next
    sampler.close(timeout=10)
    assert sampler._thread is not None and not sampler._thread.is_alive()
    assert source.count(Cadence.FAST) == 1
    assert sampler.cpu_seconds > 0


def test_intervals_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Sampler([], interval=0)
