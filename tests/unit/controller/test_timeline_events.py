"""Named events on hand-built timelines: each found at the window it starts in, with its
evidence; none on a steady run; the sentences compare prints for two configurations."""

from __future__ import annotations

from typing import Any

from tunelab.analysis.timeline.differences import compare_differences, differences
from tunelab.analysis.timeline.events import find_events
from tunelab.analysis.timeline.model import parse

N = 40


def timeline(series: dict[str, list[Any]] | None = None, step: float = 1.0) -> dict[str, Any]:
    steady: dict[str, list[Any]] = {
        "client.output_tokens": [300.0 + (w % 3) for w in range(N)],
        "client.in_flight": [8.0] * N,
        "engine.running": [8.0] * N,
        "engine.waiting": [0.0] * N,
        "engine.kv_cache_usage": [0.4] * N,
        "engine.preemptions": [0.0] * N,
        "gpu0.power_watts": [450.0] * N,
        "gpu0.utilization_ratio": [0.97] * N,
        "gpu0.clock_event_reasons": [0.0] * N,
        "gpu0.sm_clock_hertz": [1.98e9] * N,
        "host.client_cpu_ratio": [0.3] * N,
        "host.client_wait_ratio": [0.0] * N,
    }
    steady.update(series or {})
    return {
        "timeline": 1,
        "step_seconds": step,
        "start": 1.7e9,
        "windows": N,
        "series": steady,
        "points": [{"index": 0, "start_s": 0.0, "measure_s": 2.0 * step, "end_s": N * step}],
        "gpus": [{"power_limit_watts": 700.0, "sm_clock_max_hertz": 1.98e9}],
        "engine": "vllm",
        "batch_flag": "--max-num-seqs",
    }


def kinds(doc: dict[str, Any]) -> list[tuple[str, float]]:
    return [(e.kind, e.at_s) for e in find_events(parse(doc))]


def between(a: int, b: int, inside: float, outside: float) -> list[float]:
    return [inside if a <= w < b else outside for w in range(N)]


def test_a_steady_run_has_no_events() -> None:
    assert kinds(timeline()) == []


def test_preemptions_with_a_full_cache() -> None:
    doc = timeline(
        {
            "engine.preemptions": between(12, 20, 5.0, 0.0),
            "engine.kv_cache_usage": between(11, 20, 1.0, 0.4),
        }
    )
    [event] = find_events(parse(doc))
    assert (event.kind, event.at_s, event.end_s) == ("kv_cache_full", 12.0, 20.0)
    assert event.values["preemptions"] == 40
    assert "preempted 40 requests with the KV cache at 100%" in event.evidence


def test_a_queue_that_grows_while_running_is_flat_names_the_batch_flag() -> None:
    waiting = [float(max(0, w - 9)) if 10 <= w < 25 else 0.0 for w in range(N)]
    [event] = find_events(parse(timeline({"engine.waiting": waiting})))
    assert (event.kind, event.at_s) == ("batch_limit", 10.0)
    assert "grew from 1 to 15 while running held at 8" in event.evidence
    assert "--max-num-seqs" in event.evidence


def test_a_queue_while_running_still_climbs_is_no_batch_limit() -> None:
    doc = timeline(
        {
            "engine.waiting": between(10, 20, 3.0, 0.0),
            "engine.running": [float(w) for w in range(N)],
        }
    )
    assert kinds(doc) == []


def test_power_at_the_cap_and_throttled_clocks_with_nvmls_reason() -> None:
    doc = timeline(
        {
            "gpu0.power_watts": between(5, 9, 695.0, 450.0),
            "gpu0.clock_event_reasons": between(20, 24, float(0x4 | 0x1), 0.0),  # + idle bit
            "gpu0.sm_clock_hertz": between(20, 24, 1.5e9, 1.98e9),
        }
    )
    events = find_events(parse(doc))
    assert [(e.kind, e.at_s) for e in events] == [("power_cap", 5.0), ("clock_throttle", 20.0)]
    assert "695 W of its 700 W limit" in events[0].evidence
    assert "(sw_power_cap), SM clock 1500 MHz of 1980" in events[1].evidence
    assert kinds(timeline({"gpu0.clock_event_reasons": [1.0] * N})) == []  # idle: no throttle


def test_a_low_gpu_with_a_saturated_or_a_starved_client() -> None:
    doc = timeline(
        {
            "gpu0.utilization_ratio": between(10, 30, 0.2, 0.97),
            "host.client_cpu_ratio": between(10, 18, 0.99, 0.3),
            "host.client_wait_ratio": between(22, 30, 0.3, 0.0),
        }
    )
    events = find_events(parse(doc))
    assert [(e.kind, e.at_s, e.values["client"]) for e in events] == [
        ("gpu_underused", 10.0, "saturated"),
        ("gpu_underused", 22.0, "starved"),
    ]
    # a low GPU while the client is fine is the server's own business: no event
    assert kinds(timeline({"gpu0.utilization_ratio": [0.2] * N})) == []


def test_a_throughput_step_within_the_point_at_a_finer_step() -> None:
    tokens = [100.0 + (w % 2) if w < 26 else 40.0 + (w % 2) for w in range(N)]
    [event] = find_events(parse(timeline({"client.output_tokens": tokens}, step=0.25)))
    assert (event.kind, event.at_s) == ("throughput_step", 6.5)  # window 26 x 0.25 s
    assert "from 402 to 162 tokens/s" in event.evidence


def test_the_warmup_is_not_read_for_a_step() -> None:
    tokens = [10.0 if w < 2 else 300.0 + (w % 3) for w in range(N)]  # warm-up ramps up
    assert kinds(timeline({"client.output_tokens": tokens})) == []


def test_differences_between_two_configurations() -> None:
    full = [e.to_dict() for e in find_events(parse(timeline({
        "engine.preemptions": between(40 - 10, 40, 14.0, 0.0),
    })))]  # fmt: skip
    assert differences("512", [full], "128", [[]]) == [
        "512 preempted 140 times after t=30 s; 128 never"
    ]
    assert differences("512", [full], "128", [full]) == []
    rows = [
        {"id": "e1", "name": "x", "varied": {}},
        {"id": "e2", "name": "x/--max-num-seqs=512", "varied": {"--max-num-seqs": "512"}},
    ]
    lines = compare_differences(rows, {"e1": [[]], "e2": [full, full]})
    assert lines == ["--max-num-seqs=512 preempted 280 times after t=30 s; x never"]


def test_a_ramped_point_is_not_read_for_a_step() -> None:
    tokens = [100.0 if w < 26 else 40.0 for w in range(N)]
    doc = timeline({"client.output_tokens": tokens})
    assert [k for k, _ in kinds(doc)] == ["throughput_step"]
    doc["points"][0]["ramp"] = True
    assert kinds(doc) == []
