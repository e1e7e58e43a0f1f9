"""``tunelab search show --json``: every interval is over launches (one value per launch at the
race's load), with ``launches`` beside it; the points of one launch never make an interval; the
interval of a positive objective never reaches zero."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.summary import search_document
from tunelab.controller.states import SearchState, TrialState
from tunelab.controller.store.search_models import SearchRow, TrialRow

TEXT = """
name: s
server: {command: [sim], flags: {--port: "{port}"}, port: auto, ready: {model: m}}
benchmark: {requests: 10, input_len: 8, output_len: 8}
search:
  space:
    server.flags.--max-num-seqs: [16, 32, 64]
  objective: {maximize: output_throughput}
  slo: {tpot_p99_ms: 50}
  load: {concurrency: [4]}
  budget: {trials: 10}
  strategy: successive-halving
"""
SEQS = "server.flags.--max-num-seqs"


def search_row() -> SearchRow:
    found = search_from_text(TEXT)
    assert found is not None
    return SearchRow("g-1", found.name, SearchState.RUNNING, found.spec.to_dict(), found.base, 0.0)


def done(number: int, seqs: int, points: list[float], race: int = 0, rung: int = 0) -> TrialRow:
    """A finished launch with its answer points (its value is their mean)."""
    row = TrialRow(
        "g-1", number, {SEQS: seqs}, TrialState.DONE, 1.0, rung=rung, experiment_id=f"x-{number}"
    )
    row.samples, row.objective = points, round(sum(points) / len(points), 6)
    row.load = ("concurrency", 4.0)
    if race:
        row.phase, row.race_round = "race", race
    return row


def document(trials: list[TrialRow]) -> dict[str, Any]:
    doc = search_document(search_row(), trials)
    json.dumps(doc)  # what --json prints
    return doc


def best(trials: list[TrialRow]) -> dict[str, Any]:
    doc = document(trials)
    assert isinstance(doc["best"], dict)
    return doc["best"]


def test_one_launch_gives_a_null_interval() -> None:
    found = best([done(1, 16, [100.0]), done(2, 32, [150.0])])
    assert found["params"] == {SEQS: 32}
    assert found["objective"] == 150.0 and found["interval"] is None and found["launches"] == 1


def test_two_points_of_one_launch_never_make_an_interval() -> None:
    """The load found and its confirming repeat are points of one launch."""
    doc = document([done(1, 16, [100.0]), done(2, 32, [148.0, 152.0])])
    assert doc["best"]["interval"] is None and doc["best"]["launches"] == 1
    assert doc["best"]["objective"] == 150.0
    assert all(t["interval"] is None and t["launches"] == 1 for t in doc["trials"])


def test_launches_give_an_interval_around_the_objective() -> None:
    for values in ([148.0, 152.0], [140.0, 150.0, 160.0], [150.0, 150.0]):
        trials = [done(1, 16, [100.0]), done(2, 32, [values[0]])]
        for i, v in enumerate(values[1:]):  # a round of the race: both contenders, noisy 16
            trials += [
                done(3 + 2 * i, 32, [v], race=1 + i),
                done(4 + 2 * i, 16, [(60.0, 130.0)[i]], race=1 + i),
            ]
        found = best(trials)
        lo, hi = found["interval"]
        assert isinstance(lo, float) and isinstance(hi, float)
        assert lo <= found["objective"] <= hi, (lo, found["objective"], hi)
        assert found["objective"] == round(sum(values) / len(values), 6)
        assert found["launches"] == len(values)


def test_the_interval_of_a_positive_objective_never_crosses_zero() -> None:
    """Two launches far apart: a t interval of the raw values reaches below zero (the issue's
    [-140, 629]); the interval over launches on the log scale stays above it."""
    trials = [done(1, 16, [10.0]), done(2, 32, [40.0]), done(3, 32, [600.0], race=1)]
    trials.append(done(4, 16, [30.0], race=1))  # the race's round is whole: both contenders
    found = best(trials)
    lo, hi = found["interval"]
    assert 0.0 < lo < found["objective"] < hi
    row = document(trials)["trials"][2]
    assert row["launches"] == 2 and row["interval"][0] > 0.0


def test_a_survivor_of_a_deeper_rung_is_the_incumbent() -> None:
    """A candidate promoted to rung 1 ranks above one that stopped at rung 0, whatever its
    short first launch said; its interval is over its launches at its deepest rung."""
    trials = [done(1, 16, [100.0]), done(2, 32, [130.0]), done(3, 32, [90.0, 91.0], rung=1)]
    found = best(trials)
    assert found["params"] == {SEQS: 32} and found["trial"] == 3
    assert found["objective"] == 90.5 and found["launches"] == 1 and found["interval"] is None


def test_the_document_says_what_it_cost_and_what_launches_vary_by() -> None:
    trials = [done(1, 16, [100.0]), done(2, 32, [150.0])]
    trials += [done(3, 32, [165.0], race=1), done(4, 16, [110.0], race=1)]
    for t in trials:
        t.details.update(load_seconds=20.0, measure_seconds=10.0)
        t.gpu_seconds = 30.0
    doc = document(trials)
    assert doc["cost"] == {
        "launches": 4,
        "gpu_seconds": 120.0,
        "load_seconds": 80.0,
        "measure_seconds": 40.0,
    }
    # two launches each: log(165/150)^2 / 2 + log(110/100)^2 / 2 over 2 df -> CV ~ 6.8 %
    noise = doc["noise"]
    assert noise["launches"] == 4 and noise["blocks"] == 0 and noise["within_cv"] is None
    expected = math.sqrt(math.expm1((math.log(1.1) ** 2 / 2 + math.log(1.1) ** 2 / 2) / 2))
    assert noise["launch_cv"] == pytest.approx(expected, rel=1e-4)


def test_launches_measured_in_blocks_split_the_noise_between_and_within() -> None:
    # launch means 100, 110 (config 16) and 150, 165 (config 32): launch noise; blocks +-1 %
    trials = [done(1, 16, [100.0]), done(2, 32, [150.0])]
    trials += [done(3, 32, [165.0], race=1), done(4, 16, [110.0], race=1)]
    for t in trials:
        v = t.objective or 0.0
        t.details["blocks"] = [v * 0.99, v, v * 1.01]
    noise = document(trials)["noise"]
    assert noise["launches"] == 4 and noise["blocks"] == 12
    assert 0.005 < noise["within_cv"] < 0.015  # the blocks' +-1 %
    assert noise["launch_cv"] > 0.05  # log(1.1) apart within each configuration


def test_a_cancelled_search_says_it_was_cancelled() -> None:
    """Issue 43.7: the answer of a search cancelled mid-race read 'racing (round 0): ...' as if
    it were still running."""
    row = search_row()
    row.state = SearchState.CANCELLED
    doc = search_document(row, [done(1, 16, [100.0]), done(2, 32, [150.0])])
    assert doc["answer"].startswith("cancelled before the race was decided: trial 2"), doc["answer"]
    assert doc["answer"].endswith("undecided")
