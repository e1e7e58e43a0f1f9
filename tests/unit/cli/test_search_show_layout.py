"""``tunelab search show``'s table fits 100 columns (issue 37.6): the parameters as a compact
column of values under a legend, the server argv on its own lines, SLOs as ``p99 TPOT ≤ 25 ms``;
``gpu_seconds`` only where the trial had GPUs."""

from __future__ import annotations

import shlex
from typing import Any

from tests.support.daemon_proc import REPO
from tunelab.analysis.slos import slo_text
from tunelab.cli.search_cmd import render_search
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.summary import search_document
from tunelab.controller.states import SearchState, TrialState
from tunelab.controller.store.search_models import SearchRow, TrialRow

TOKENS, SEQS = "server.flags.--max-num-batched-tokens", "server.flags.--max-num-seqs"
MARGINS = {"tpot_p99_ms": 0.4213, "ttft_p99_ms": 0.0312}


def trial(number: int, tokens: int, seqs: int, value: float | None, **details: Any) -> TrialRow:
    row = TrialRow("g-0123456789ab", number, {TOKENS: tokens, SEQS: seqs}, TrialState.DONE, 1.0)
    row.experiment_id = f"x-{number:012d}"
    row.objective = value
    row.samples = [] if value is None else [value]
    row.details = {"load": {"concurrency": 38}, "slo_margins": MARGINS, "gpu_seconds": 41.5,
                   "gpus": 0, **details}  # fmt: skip
    row.load, row.gpu_seconds = ("concurrency", 38.0), 41.5
    row.slo_ratios = {k: 1.0 - v for k, v in MARGINS.items()}
    race = details.get("race")
    if isinstance(race, int) and race:
        row.phase, row.race_round = "race", race
    return row


def search_doc(trials: list[TrialRow]) -> dict[str, Any]:
    found = search_from_text((REPO / "examples" / "search-sim.yaml").read_text())
    assert found is not None
    row = SearchRow(
        "g-0123456789ab", found.name, SearchState.DONE, found.spec.to_dict(), found.base, 0.0
    )
    row.message = "budget reached (10 trials)"
    return search_document(row, trials)


def finished_search() -> dict[str, Any]:
    trials = [
        trial(1, 512, 8, 741.2),
        trial(2, 512, 16, 1380.9),
        trial(3, 4096, 64, 3911.4, load={"concurrency": 38}),
        trial(4, 4096, 128, None, message="no load met the SLOs"),
        trial(5, 512, 128, None),
        trial(6, 4096, 64, 3874.0, race=1),
        trial(7, 4096, 64, 3950.2, race=2),
        trial(8, 512, 8, 744.0, race=1),
        trial(9, 512, 8, 739.1, race=2),
    ]
    trials[4].state, trials[4].failure_reason = TrialState.FAILED, "CUDA_OOM"
    return search_doc(trials)


def test_every_line_fits_100_columns() -> None:
    doc = finished_search()
    assert doc["recommendation"]["argv"], "the example's argv is rendered"
    text = render_search(doc)
    wide = [line for line in text.splitlines() if len(line) > 100]
    assert not wide, "\n".join(wide)
    assert "parameters: --max-num-batched-tokens --max-num-seqs" in text
    row = next(line for line in text.splitlines() if line.startswith("1 "))
    assert "4096 64" in row and "max-num-seqs" not in row
    assert "TPOT +42% TTFT +3%" in row


def test_the_server_argv_is_on_its_own_lines_and_pastes_into_a_shell() -> None:
    doc = finished_search()
    lines = render_search(doc).splitlines()
    start = lines.index("  server argv:")
    end = lines.index("  spec snippet:")
    command = " ".join(line.strip().removesuffix("\\").strip() for line in lines[start + 1 : end])
    assert shlex.split(command) == doc["recommendation"]["argv"]
    assert all(line.strip().startswith("--") for line in lines[start + 2 : end])


def test_slos_read_as_limits_not_a_python_dict() -> None:
    both = slo_text({"tpot_p99_ms": 25, "ttft_p99_ms": 150})
    assert both == "p99 TPOT ≤ 25 ms, p99 TTFT ≤ 150 ms"
    assert slo_text({"itl_median_ms": 7.5}) == "median ITL ≤ 7.5 ms"
    text = render_search(finished_search())
    assert "under p99 TPOT ≤ 25 ms, p99 TTFT ≤ 150 ms" in text
    assert "tpot_p99_ms" not in text and "{'" not in text


def test_gpu_seconds_only_where_the_trial_had_gpus() -> None:
    cpu = search_doc([trial(1, 512, 8, 741.2, gpus=0)])
    assert cpu["trials"][0]["gpu_seconds"] is None and cpu["gpu_seconds"] is None
    gpu = search_doc([trial(1, 512, 8, 741.2, gpus=2), trial(2, 512, 16, 900.0, gpus=0)])
    assert [t["gpu_seconds"] for t in gpu["trials"]] == [41.5, None]
    assert gpu["gpu_seconds"] == 41.5


def test_launches_at_a_given_load_are_not_ranked_with_the_strategys() -> None:
    """Issue 46: in a search whose SLOs nobody met, the drift launches of the default (measured
    at a fixed load whatever the SLOs say) were ranked #1-#4 with objectives."""
    trials = [trial(1, 512, 8, None), trial(2, 512, 16, None)]
    for number in (3, 4, 5, 6):
        drift = trial(number, 512, 8, 700.0 + number)
        drift.phase = "drift_start" if number < 5 else "drift_end"
        trials.append(drift)
    text = render_search(search_doc(trials))
    rows = [line for line in text.splitlines() if " drift " in line]
    assert len(rows) == 4 and all(line.startswith("- ") for line in rows), rows


def test_the_answer_says_what_it_cost() -> None:
    doc = finished_search()
    doc["cost"] = {
        "launches": 9,
        "gpu_seconds": 373.5,
        "load_seconds": 45.0,
        "measure_seconds": 300,
    }
    doc["noise"] = {"launch_cv": 0.012, "within_cv": 0.031, "launches": 4, "blocks": 12}
    lines = render_search(doc).splitlines()
    assert (
        "cost: 9 launches, 374 GPU-s (loading 45, measuring 300); launch noise 1.2%, "
        "within 3.1% (12 blocks)"
    ) in lines
    doc["noise"] = {"launch_cv": None, "within_cv": None, "launches": 0, "blocks": 0}
    doc["cost"]["load_seconds"] = None
    assert "cost: 9 launches, 374 GPU-s (loading ?, measuring 300)" in render_search(doc)
