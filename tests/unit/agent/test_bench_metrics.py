"""The agent's ``tunelab_bench_*`` series show only what runs: a finished run's gauges go at
once and its counters after FINISHED_LINGER seconds (issue 24: 45 series 31 min after the runs)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tunelab.agent.runs.metrics import FINISHED_LINGER, BenchMetricsCollector, exported_progress
from tunelab.agent.runs.record import RunRecord, RunSpec
from tunelab.agent.runs.states import RunState

PROGRESS = {
    "output_tokens_total": 640,
    "requests_by_outcome": {"ok": 20},
    "output_tokens_per_second": 312.5,
    "concurrency": 4,
}


def record(run_id: str, state: RunState, started: float, finished: float = 0.0) -> RunRecord:
    spec = RunSpec(server=None, server_id="s", builtin={}, command=None, max_duration=0,
                   experiment=f"exp-{run_id}")  # fmt: skip
    return RunRecord(run_id=run_id, spec=spec, state=state, progress=dict(PROGRESS),
                     started_at=started, finished_at=finished)  # fmt: skip


def sample(registry: CollectorRegistry, name: str, run: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"run": run, **labels})


def test_a_finished_run_keeps_counters_for_the_linger_then_vanishes() -> None:
    now = 10_000.0
    runs = [
        record("going", RunState.BENCHMARKING, started=now - 100),
        record("just-done", RunState.SUCCEEDED, started=now - 200, finished=now - 5),
        record("long-done", RunState.SUCCEEDED, started=now - 3000, finished=now - 1860),
        record(
            "failed-old",
            RunState.FAILED_BENCHMARK,
            started=now - 900,
            finished=now - FINISHED_LINGER - 1,
        ),
    ]
    registry = CollectorRegistry()
    registry.register(BenchMetricsCollector(lambda: exported_progress(runs, now)))

    assert sample(registry, "tunelab_bench_output_tokens_total", "exp-going") == 640
    assert sample(registry, "tunelab_bench_output_tokens_per_second", "exp-going") == 312.5
    assert sample(registry, "tunelab_bench_concurrency", "exp-going") == 4
    # finished 5 s ago: the counters' final values for the next scrape, no current point
    assert sample(registry, "tunelab_bench_output_tokens_total", "exp-just-done") == 640
    assert sample(registry, "tunelab_bench_requests_total", "exp-just-done", outcome="ok") == 20
    assert sample(registry, "tunelab_bench_output_tokens_per_second", "exp-just-done") is None
    assert sample(registry, "tunelab_bench_concurrency", "exp-just-done") is None
    for gone in ("exp-long-done", "exp-failed-old"):
        for name in ("tunelab_bench_output_tokens_total", "tunelab_bench_concurrency"):
            assert sample(registry, name, gone) is None, (gone, name)


def test_nothing_running_exports_no_bench_series() -> None:
    runs = [record("a", RunState.SUCCEEDED, started=0.0, finished=10.0)]
    assert exported_progress(runs, now=10.0 + FINISHED_LINGER + 0.1) == {}
