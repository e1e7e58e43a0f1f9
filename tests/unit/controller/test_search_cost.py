"""A launch's cost from its attempt's transitions, and ``cost`` in ``search show --json``."""

from __future__ import annotations

from typing import Any

from tunelab.controller.search.cost import blocks_of, cost_json, launch_cost, phases
from tunelab.controller.states import AttemptState, TrialState
from tunelab.controller.store.models import AttemptRow
from tunelab.controller.store.search_models import TrialRow


def _attempt(aid: str, gpus: list[int], finished: float | None) -> AttemptRow:
    return AttemptRow(aid, "x-1", 1, "h", AttemptState.SUCCEEDED, gpus, finished_at=finished)


def _events(aid: str, times: dict[str, float]) -> list[dict[str, Any]]:
    return [{"ref": aid, "to_state": s, "at": t} for s, t in times.items()]


def test_load_is_starting_to_ready_and_measuring_ready_to_the_end_times_the_gpus() -> None:
    a = _attempt("x-1-a1", [0, 1], finished=200.0)
    ev = _events(
        "x-1-a1", {"DISPATCHING": 5.0, "STARTING": 10.0, "READY": 70.0, "BENCHMARKING": 71.0}
    )
    ev += _events("x-1-a0", {"STARTING": 0.0})  # another attempt's: not this one's
    assert phases(a, ev) == {"load_seconds": 120.0, "measure_seconds": 260.0}


def test_a_launch_that_failed_loading_has_a_load_and_no_measuring() -> None:
    a = _attempt("x-1-a1", [], finished=40.0)  # no GPU: wall seconds
    assert phases(a, _events("x-1-a1", {"STARTING": 10.0})) == {"load_seconds": 30.0}


def test_a_retried_launch_loads_twice() -> None:
    first, second = _attempt("x-1-a1", [0], 50.0), _attempt("x-1-a2", [0], 150.0)
    ev = _events("x-1-a1", {"STARTING": 0.0}) + _events(
        "x-1-a2", {"STARTING": 60.0, "READY": 100.0}
    )
    assert launch_cost([first, second], ev) == {"load_seconds": 90.0, "measure_seconds": 50.0}


def test_the_search_sums_what_its_launches_cost() -> None:
    def trial(
        n: int, state: TrialState, gpu_seconds: float | None = None, **details: float
    ) -> TrialRow:
        row = TrialRow("g", n, {}, state, 0.0, experiment_id=f"x-{n}", details=dict(details))
        row.gpu_seconds = gpu_seconds  # the launch record's column
        return row

    trials = [
        trial(1, TrialState.DONE, gpu_seconds=100.0, load_seconds=60.0, measure_seconds=40.0),
        trial(2, TrialState.FAILED, gpu_seconds=30.0, load_seconds=30.0),
        trial(3, TrialState.RUNNING),
        TrialRow("g", 4, {}, TrialState.SKIPPED, 0.0),
    ]
    assert cost_json(trials) == {
        "launches": 2,
        "gpu_seconds": 130.0,
        "load_seconds": 90.0,
        "measure_seconds": 40.0,
    }


def timeline_doc(tokens: list[float]) -> dict[str, Any]:
    """One point measured from 0 s to 30 s in 1 s windows (blocks of 10 s)."""
    return {
        "timeline": 1,
        "step_seconds": 1.0,
        "start": 1000.0,
        "windows": len(tokens),
        "series": {"client.output_tokens": tokens, "client.completed": [1.0] * len(tokens)},
        "points": [{"index": 0, "start_s": 0.0, "measure_s": 0.0, "end_s": float(len(tokens))}],
    }


def test_a_launch_is_measured_in_blocks_of_its_answer_point() -> None:
    tokens = [100.0] * 10 + [120.0] * 10 + [110.0] * 10
    assert blocks_of(timeline_doc(tokens), 0) == [100.0, 120.0, 110.0]  # tokens/s over 10 s each
    assert blocks_of(timeline_doc(tokens), 3) == []  # no such point
    assert blocks_of(None, 0) == [] and blocks_of(timeline_doc(tokens), None) == []
    assert blocks_of({"timeline": 99}, 0) == []  # a document this version cannot read


def test_a_ready_the_poll_never_saw_is_the_benchmarks_start() -> None:
    """Found by the e2e test: a short start-up was READY between two polls, so the stored
    transitions go STARTING -> BENCHMARKING; the launch still has a load and a measuring."""
    a = _attempt("x-1-a1", [], finished=20.0)
    ev = _events("x-1-a1", {"STARTING": 10.0, "BENCHMARKING": 12.0})
    assert phases(a, ev) == {"load_seconds": 2.0, "measure_seconds": 8.0}
