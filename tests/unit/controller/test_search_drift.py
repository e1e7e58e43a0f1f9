"""Drift over a search (drift.py): the default re-launched at the search's start and end at one
load, judged over fake stored trials (a drift beyond the noise warns; noise alone, a stable
machine or one launch a side does not), what is queued when (a replay queues nothing twice),
and through the driver over a real SQLite file, a machine that slows down mid-search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.controller import test_search_driver as harness
from tests.unit.controller.test_search_driver import (
    BASE,
    SEARCH,
    run_queued,
    submit,
    surface,
    with_hosts,
)
from tunelab.controller.search import drift
from tunelab.controller.search.answer import warnings
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.search.space import Load, Param, SearchSpec
from tunelab.controller.search.summary import search_document
from tunelab.controller.states import TrialState
from tunelab.controller.store import SqliteStore
from tunelab.controller.store.search_models import TrialRow

A = "server.flags.--max-num-seqs"


def spec_of(margin: float = 0.05, confirm: int = 4) -> SearchSpec:
    return SearchSpec(
        space=(Param(A, "choice", (16, 64)),),
        objective="output_throughput",
        maximize=True,
        slo={"tpot_p99_ms": 50.0},
        load=Load("concurrency", True, 0.0, ()),
        strategy="grid",
        max_trials=2,
        confirm_launches=confirm,
        margin=margin,
    )


def trial(number: int, objective: float | None, phase: str = "", value: int = 16) -> TrialRow:
    row = TrialRow("g-1", number, {A: value}, TrialState.DONE, 1.0, experiment_id=f"x-{number}")
    row.objective = objective
    row.samples = [] if objective is None else [objective]
    row.load = ("concurrency", 12.0)
    if phase:
        row.phase = f"drift_{phase}"
    return row


def drifted(start: list[float], end: list[float], margin: float = 0.05) -> drift.Drift | None:
    trials = [trial(1, 100.0), trial(2, 300.0, value=64)]
    trials += [trial(3 + i, v, drift.START) for i, v in enumerate(start)]
    trials += [trial(10 + i, v, drift.END) for i, v in enumerate(end)]
    return drift.judge(spec_of(margin), trials)


def test_a_machine_slower_at_the_end_beyond_the_noise_is_a_drift_and_a_warning() -> None:
    found = drifted([100.0, 101.0], [80.0, 81.0])
    assert found is not None and found.verdict == drift.DRIFTED
    assert found.start == [3, 4] and found.end == [10, 11]
    assert found.judgement.interval is not None and found.judgement.interval[1] < -0.05
    text = drift.warning(spec_of(), found)
    assert text.startswith("drift: the default measured -19.9%")
    assert "trials 10, 11 against 3, 4, at concurrency 12" in text


def test_a_change_within_the_margin_or_the_noise_is_no_drift() -> None:
    steady = drifted([100.0, 101.0], [100.5, 100.0])
    assert steady is not None and steady.verdict == drift.STABLE
    assert drift.warning(spec_of(), steady) == ""
    # 12 % lower, but two launches a side this spread cannot tell it from noise: the one judge
    # says undecided ("not judged", no warning), never "stable" over an interval this wide
    noisy = drifted([100.0, 70.0], [60.0, 90.0])
    assert noisy is not None and noisy.verdict == drift.UNJUDGED
    interval = noisy.judgement.interval
    assert interval is not None and interval[0] < -0.05 < interval[1]
    assert drift.warning(spec_of(), noisy) == ""
    # the same 2 % drift is beyond a 1 % margin, within a 5 % one
    small = drifted([100.0, 100.1], [98.0, 98.1], margin=0.01)
    assert small is not None and small.verdict == drift.DRIFTED
    wide = drifted([100.0, 100.1], [98.0, 98.1], margin=0.05)
    assert wide is not None and wide.verdict == drift.STABLE


def test_one_launch_a_side_is_not_judged_and_no_drift_launch_is_none() -> None:
    found = drifted([100.0], [50.0])
    assert found is not None and found.verdict == drift.UNJUDGED
    assert found.judgement.interval is None
    assert drift.warning(spec_of(), found) == ""
    assert drift.judge(spec_of(), [trial(1, 100.0)]) is None


def test_start_launches_wait_for_the_default_load_and_are_queued_once() -> None:
    spec = spec_of()
    assert drift.pending(spec, [], drift.START) == []  # no load yet
    failed = trial(1, None)
    failed.state = TrialState.FAILED
    failed.load = None
    assert drift.pending(spec, [failed], drift.START) == []
    trials = [trial(1, 100.0)]
    start = drift.pending(spec, trials, drift.START)
    assert len(start) == drift.LAUNCHES
    assert all(p.drift == "start" and p.load == {"concurrency": 12.0} for p in start)
    assert all(p.params == {A: 16} and p.rung == 0 and not p.race for p in start)
    assert drift.pending(spec, trials, drift.END) == []  # no end before a start
    trials += [trial(2, 101.0, drift.START)]  # one queued (one slot free): one more to go
    assert [p.drift for p in drift.pending(spec, trials, drift.START)] == ["start"]
    trials += [trial(3, 99.0, drift.START)]
    assert drift.pending(spec, trials, drift.START) == []  # replayed: nothing twice
    end = drift.pending(spec, trials, drift.END)
    assert [p.drift for p in end] == ["end"] * drift.LAUNCHES
    trials += [trial(4, 101.0, drift.END), trial(5, 101.0, drift.END)]
    assert drift.pending(spec, trials, drift.END) == []
    assert drift.pending(spec_of(confirm=0), [trial(1, 100.0)], drift.START) == []


def test_the_answer_warns_of_the_drift() -> None:
    trials = [trial(1, 100.0), trial(2, 300.0, value=64)]
    trials += [trial(3, 100.0, drift.START), trial(4, 102.0, drift.START)]
    trials += [trial(5, 70.0, drift.END), trial(6, 71.0, drift.END)]
    found = warnings(spec_of(), trials)
    assert len(found) == 1 and found[0].startswith("drift: ")


def _search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow_after: int | None, parallel: int = 4
) -> dict[str, Any]:
    """A grid search run through the driver; once ``slow_after`` launches have run, every
    launch measures 25 % lower (the machine slowed down)."""
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    text = SEARCH.replace("STRATEGY", "grid").replace("trials: 40", "trials: 8")
    submit(store, BASE + text + f"  parallel: {parallel}\n")
    driver = SearchDriver(store, lambda: 1.0)
    launched = 0
    for _ in range(100):
        driver.tick()
        search = store.get_search("g-1")
        assert search is not None
        if search.state != "RUNNING":
            assert search.state == "DONE", search.message
            return search_document(search, store.search_trials("g-1"))
        launched += len(run_queued(store))
        if slow_after is not None and launched >= slow_after:
            monkeypatch.setattr(harness, "surface", slower)
    raise AssertionError("the search did not end")


def slower(flags: dict[str, Any], concurrency: int) -> dict[str, float]:
    found = surface(flags, concurrency)
    return {**found, "output_throughput": found["output_throughput"] * 0.75}


@pytest.mark.parametrize("parallel", [1, 4])
def test_a_steady_machine_gives_no_warning_and_drift_launches_are_none_of_the_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel: int
) -> None:
    doc = _search(tmp_path, monkeypatch, None, parallel)
    phases = [t["drift"] for t in doc["trials"] if t["drift"]]
    assert phases == ["start", "start", "end", "end"]
    first = next(t for t in doc["trials"] if not t["drift"])
    for t in doc["trials"]:
        if t["drift"]:
            assert t["params"] == first["params"] and t["load"] == first["load"]
    assert doc["drift"]["verdict"] == drift.STABLE and doc["warnings"] == []
    if parallel == 1:  # one at a time: the start right after the default's first trial
        assert [t["number"] for t in doc["trials"] if t["drift"] == "start"] == [2, 3]
    assert doc["best"]["params"] == {A: 64, "server.flags.--chunk": 512}


def test_a_machine_slowed_mid_search_is_a_warning_on_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = _search(tmp_path, monkeypatch, 6)
    assert doc["drift"]["verdict"] == drift.DRIFTED
    assert doc["drift"]["change_pct"] == -25.0
    assert doc["drift"]["launches"] == [2, 2]
    assert any(w.startswith("drift: the default measured -25.0%") for w in doc["warnings"])


def test_the_search_page_prints_the_warning_and_each_trials_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunelab.analysis.report.search_page import render_search_report
    from tunelab.cli.search_cmd import render_search

    doc = _search(tmp_path, monkeypatch, 6)
    for t in doc["trials"]:
        t.update(host="h1", host_class="1x NVIDIA H200, driver 570")
    page = render_search_report(doc, {}, "search")
    assert "<p class='warning'>warning: drift: the default measured -25.0%" in page
    assert "<th>host</th>" in page and "h1 (1x NVIDIA H200, driver 570)" in page
    assert "(drift start)" in page and "(drift end)" in page
    text = render_search(doc)
    assert "\nwarning: drift: the default measured -25.0%" in text
    assert "hosts: h1: 1x NVIDIA H200, driver 570" in text
