"""``tunelab search show --json``: ``best.interval`` is the 95 % interval of the best
candidate's samples, ``[lo, hi]`` around its objective once it has two samples, ``null`` with
one; the objective is the mean over all of the candidate's launches, never a stale one."""

from __future__ import annotations

import json
from typing import Any

from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.summary import search_document
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
    return SearchRow("g-1", found.name, "RUNNING", found.spec.to_dict(), found.base, 0.0)


def done(number: int, seqs: int, samples: list[float], pooled: list[float]) -> TrialRow:
    """A finished launch: its own samples, its objective the mean of ``pooled`` (the
    candidate's samples up to and including it, as the driver records it)."""
    row = TrialRow("g-1", number, {SEQS: seqs}, "DONE", 1.0, rung=0, experiment_id=f"x-{number}")
    row.samples, row.objective = samples, round(sum(pooled) / len(pooled), 6)
    row.details = {"load": {"concurrency": 4}}
    return row


def best(trials: list[TrialRow]) -> dict[str, Any]:
    doc = search_document(search_row(), trials)
    json.dumps(doc)  # what --json prints
    assert isinstance(doc["best"], dict)
    return doc["best"]


def test_one_sample_gives_a_null_interval() -> None:
    found = best([done(1, 16, [100.0], [100.0]), done(2, 32, [150.0], [150.0])])
    assert found["params"] == {SEQS: 32}
    assert found["objective"] == 150.0 and found["interval"] is None


def test_two_or_more_samples_give_lo_and_hi_around_the_objective() -> None:
    for samples in ([148.0, 152.0], [140.0, 150.0, 160.0], [150.0, 150.0]):
        found = best([done(1, 16, [100.0], [100.0]), done(2, 32, samples, samples)])
        interval, objective = found["interval"], found["objective"]
        assert isinstance(interval, list) and len(interval) == 2
        lo, hi = interval
        assert isinstance(lo, float) and isinstance(hi, float)
        assert isinstance(objective, float)
        assert lo <= objective <= hi, (lo, objective, hi)
        assert objective == sum(samples) / len(samples)


def test_the_best_is_judged_by_its_latest_launch_which_pools_every_launch() -> None:
    """A candidate first measured high and then lower over a longer promoted run: the search
    reports the pooled mean (inside its interval), and ranks the candidates by it."""
    first, later = [130.0], [90.0, 91.0, 89.0, 90.0, 90.0, 91.0, 89.0]
    trials = [
        done(1, 16, [100.0], [100.0]),
        done(2, 32, first, first),
        done(3, 32, later, first + later),
    ]
    found = best(trials)
    pooled = first + later
    assert found["params"] == {SEQS: 16}, "32's pooled mean (95) is below 16's 100"
    trials[0] = done(1, 16, [80.0], [80.0])
    found = best(trials)
    assert found["params"] == {SEQS: 32} and found["trial"] == 3
    assert found["objective"] == round(sum(pooled) / len(pooled), 6)
    lo, hi = found["interval"]
    assert lo <= found["objective"] <= hi
