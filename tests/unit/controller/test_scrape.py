"""Unit: per-attempt GPU summaries from scraped agent pages, and tokens per joule."""

from __future__ import annotations

import pytest

from tunelab.controller.scrape import (
    AttemptGpuSummary,
    benchmark_energy,
    parse_gpu_readings,
    tokens_per_joule,
)

PAGE = """# TYPE tunelab_gpu_power_watts gauge
tunelab_gpu_power_watts{{gpu="0",uuid="GPU-a"}} {p0}
tunelab_gpu_power_watts{{gpu="1",uuid="GPU-b"}} {p1}
# TYPE tunelab_gpu_energy_joules_total counter
tunelab_gpu_energy_joules_total{{gpu="0",uuid="GPU-a"}} {e0}
tunelab_gpu_energy_joules_total{{gpu="1",uuid="GPU-b"}} {e1}
# TYPE tunelab_gpu_clock_event_active gauge
tunelab_gpu_clock_event_active{{gpu="0",uuid="GPU-a",reason="sw_power_cap"}} {cap}
tunelab_gpu_clock_event_active{{gpu="0",uuid="GPU-a",reason="gpu_idle"}} 0
"""


def page(p0: float, p1: float, e0: float, e1: float, cap: int = 0) -> str:
    return PAGE.format(p0=p0, p1=p1, e0=e0, e1=e1, cap=cap)


def result(tokens: int, seconds: float) -> dict[str, object]:
    return {"points": [{"total_output_tokens": tokens, "duration": seconds}]}


def test_only_the_attempts_gpus_count_and_throttle_reasons_are_kept() -> None:
    summary = AttemptGpuSummary([0])
    summary.add(parse_gpu_readings(page(600, 100, 1000, 5000, cap=1)), at=0.0, benchmarking=True)
    summary.add(parse_gpu_readings(page(500, 100, 1550, 5100)), at=5.0, benchmarking=True)
    doc = summary.summary()
    assert set(doc["gpus"]) == {"0"}
    assert doc["gpus"]["0"]["power_watts"] == {"mean": 550.0, "max": 600.0}
    assert doc["gpus"]["0"]["clock_events_seen"] == ["sw_power_cap"]
    assert (
        doc["benchmark_energy_joules"] == 550.0 and doc["benchmark_mean_power_watts_total"] == 550.0
    )


def test_energy_counter_is_used_when_it_moved_during_the_benchmark() -> None:
    summary = AttemptGpuSummary([])
    for i, energy in enumerate([0, 700, 1400, 2100]):
        summary.add(
            parse_gpu_readings(page(350, 350, energy / 2, energy / 2)),
            at=5.0 * i,
            benchmarking=True,
        )
    doc = summary.summary()
    assert benchmark_energy(result(21000, 3.0), doc) == (2100.0, "energy counter")
    assert tokens_per_joule(result(21000, 3.0), doc) == pytest.approx(10.0)


def test_short_sweeps_fall_back_to_mean_power_times_measured_time() -> None:
    summary = AttemptGpuSummary([])
    # the agent read the energy counter before the sweep only: it never moved during it
    summary.add(parse_gpu_readings(page(300, 100, 10, 10)), at=0.0, benchmarking=True)
    summary.add(parse_gpu_readings(page(340, 100, 10, 10)), at=5.0, benchmarking=True)
    doc = summary.summary()
    assert doc["benchmark_energy_joules"] == 0.0
    energy = benchmark_energy(result(4200, 7.0), doc)
    assert energy is not None
    assert energy[0] == pytest.approx(420.0 * 7.0) and energy[1] == "mean power x benchmark time"
    assert tokens_per_joule(result(4200, 7.0), doc) == pytest.approx(4200 / 2940.0)


def test_no_gpu_figures_means_no_tokens_per_joule() -> None:
    empty = AttemptGpuSummary([]).summary()
    assert tokens_per_joule(result(100, 1.0), empty) is None
    assert tokens_per_joule(None, None) is None
