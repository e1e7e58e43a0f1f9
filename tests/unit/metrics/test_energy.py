"""The energy counter between NVML reads: integrated, extrapolated, never backwards."""

from __future__ import annotations

import pytest

from tunelab.agent.metrics.energy import EnergyTracker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tracker(**kwargs: object) -> tuple[EnergyTracker, Clock]:
    clock = Clock()
    return EnergyTracker(clock=clock, **kwargs), clock  # type: ignore[arg-type]


def test_a_scrape_between_reads_is_advanced_at_the_last_power() -> None:
    energy, clock = tracker()
    energy.update(0, "GPU-a", power=600.0, counter=1000.0, at=100.0)
    energy.update(0, "GPU-a", power=600.0, counter=1600.0, at=101.0)  # moving: 600 J in 1 s
    clock.now = 101.5
    assert energy.value(0) == pytest.approx(1900.0)  # 1600 + 600 W x 0.5 s


def test_extrapolation_stops_at_its_bound_when_the_sampler_stalls() -> None:
    energy, clock = tracker(max_extrapolation=2.0)
    energy.update(0, "GPU-a", power=500.0, counter=0.0, at=100.0)
    energy.update(0, "GPU-a", power=500.0, counter=500.0, at=101.0)
    clock.now = 200.0
    assert energy.value(0) == pytest.approx(1500.0)  # 2 s at most, not 99 s


def test_power_is_integrated_between_slow_reads_and_the_read_is_the_cross_check() -> None:
    energy, clock = tracker()
    energy.update(0, "GPU-a", power=100.0, counter=0.0, at=0.0)
    energy.update(0, "GPU-a", power=100.0, counter=100.0, at=1.0)
    for t, watts in ((2.0, 300.0), (3.0, 300.0)):  # power only: the trapezoid rule
        energy.update(0, "GPU-a", power=watts, counter=None, at=t)
    clock.now = 3.0
    assert energy.value(0) == pytest.approx(100 + 200 + 300)
    energy.update(0, "GPU-a", power=300.0, counter=610.0, at=3.0)  # the real counter
    [(index, uuid, joules, adjustment)] = energy.readings()
    assert (index, uuid) == (0, "GPU-a")
    assert joules == pytest.approx(610.0) and adjustment == pytest.approx(-10.0)


def test_the_counter_never_goes_backwards_after_an_overshoot() -> None:
    energy, clock = tracker()
    energy.update(0, "GPU-a", power=700.0, counter=0.0, at=0.0)
    energy.update(0, "GPU-a", power=700.0, counter=700.0, at=1.0)
    clock.now = 1.9
    high = energy.value(0)
    assert high == pytest.approx(1330.0)
    energy.update(0, "GPU-a", power=0.0, counter=800.0, at=2.0)  # the load stopped at 1.1 s
    clock.now = 2.5
    assert energy.value(0) == high  # held, not 800
    energy.update(0, "GPU-a", power=700.0, counter=1400.0, at=3.0)
    clock.now = 3.0
    assert energy.value(0) == pytest.approx(1400.0)


def test_a_driver_reload_resets_the_counter() -> None:
    energy, clock = tracker()
    energy.update(0, "GPU-a", power=100.0, counter=5000.0, at=0.0)
    energy.update(0, "GPU-a", power=100.0, counter=5100.0, at=1.0)
    energy.update(0, "GPU-a", power=100.0, counter=3.0, at=2.0)
    clock.now = 2.0
    assert energy.value(0) == pytest.approx(3.0)


def test_a_replayed_counter_that_stands_still_is_not_advanced() -> None:
    energy, clock = tracker()
    energy.update(0, "GPU-a", power=622.0, counter=6501.2, at=0.0)
    assert energy.calibrating(0)
    energy.update(0, "GPU-a", power=622.0, counter=6501.2, at=1.0)  # a captured snapshot
    assert not energy.calibrating(0)
    clock.now = 1.9
    assert energy.value(0) == pytest.approx(6501.2)
    energy.update(0, "GPU-a", power=622.0, counter=None, at=2.0)
    clock.now = 30.0
    assert energy.value(0) == pytest.approx(6501.2)


def test_live_power_at_the_scrape_makes_the_extrapolation_a_trapezoid() -> None:
    energy, clock = tracker(live_power=lambda index: 100.0)
    energy.update(0, "GPU-a", power=700.0, counter=0.0, at=0.0)
    energy.update(0, "GPU-a", power=700.0, counter=700.0, at=1.0)
    clock.now = 2.0
    assert energy.value(0) == pytest.approx(700.0 + (700 + 100) / 2)


def test_a_gpu_replaced_under_the_same_index_starts_again_and_gone_gpus_are_dropped() -> None:
    energy, _ = tracker()
    energy.update(0, "GPU-a", power=100.0, counter=900.0, at=0.0)
    energy.update(1, "GPU-b", power=100.0, counter=50.0, at=0.0)
    energy.update(0, "GPU-c", power=100.0, counter=10.0, at=1.0)
    energy.forget(1)
    assert [(i, uuid) for i, uuid, _, _ in energy.readings()] == [(0, "GPU-c")]
