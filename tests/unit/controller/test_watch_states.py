"""Watches that can be acted on (issue 43 item 5), through the real driver and store: the
catalogue's directions, the state that alerts follow, change points that feed it, pooled
baselines, ``launches: 1``, and a bounded history read per judgement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.controller.test_watch_driver import SPEC, Clock, insert, tick
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow
from tunelab.controller.watches.document import watch_document
from tunelab.controller.watches.driver import WatchDriver
from tunelab.controller.watches.spec import watch_from_text
from tunelab.controller.watches.webhook import verdict_text

Point = Callable[[int], dict[str, Any]]  # launch index -> the sweep point's fields


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    return store


def add(store: SqliteStore, clock: Clock, watch: str) -> WatchRow:
    return insert(store, clock, SPEC.split("watch:")[0] + "watch:\n" + watch)


def first(fields: dict[str, Any]) -> dict[str, Any]:
    """The sweep's first point (c4): what a metric without @KEY reads; its p99 TTFT is not
    the one at c8, so ``p99_ttft_ms@c8`` must pick the second point."""
    return {"concurrency": 4, **fields, "p99_ttft_ms": 1.0}


def finish(store: SqliteStore, point: Point) -> int:
    queued = store.list_experiments([ExperimentState.QUEUED], limit=1000)
    for exp in queued:
        attempt = store.create_attempt(exp.id, "h1", [0], 1.0)
        store.finish_attempt(
            attempt.id,
            AttemptState.SUCCEEDED,
            [AttemptState.DISPATCHING],
            result={
                "points": [
                    first(point(exp.repeat_index)),
                    {"concurrency": 8, **point(exp.repeat_index)},
                ]
            },
            provenance={"engine": {"name": "sglang", "version": "0.5.2"}, "recorded_at": 1.0},
        )
    return len(queued)


def occur(store: SqliteStore, driver: WatchDriver, clock: Clock, point: Point) -> dict[str, Any]:
    """One occurrence: queued, run with ``point``, judged; its verdict document."""
    tick(store, driver)
    assert finish(store, point) > 0
    tick(store, driver)
    clock.now += 5.0
    last = store.latest_occurrences("nightly", 1)[0]
    assert last.verdict is not None
    return last.verdict


def level(value: float, field: str = "output_throughput", spread: float = 0.005) -> Point:
    return lambda k: {field: value * (1 + spread * (k - 1))}


def constant(value: float) -> Point:
    return lambda k: {"output_throughput": value}


def state(doc: dict[str, Any], metric: str = "output_throughput") -> str:
    return str(doc["state"][metric]["state"])


WATCH = "  every: 5s\n  launches: 3\n  margin: 5%\n"


def test_a_p99_ttft_at_c8_that_slows_is_a_regression_through_the_driver(
    store: SqliteStore,
) -> None:
    """Issue 43: "p99_ttft_ms@c8" missed the direction table and was read as higher-is-better,
    so 30 % slower was an improvement and no alert fired."""
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [p99_ttft_ms@c8]\n")
    driver = WatchDriver(store, clock)
    assert occur(store, driver, clock, level(100.0, "p99_ttft_ms"))["verdict"] == "baseline"
    same = occur(store, driver, clock, level(100.0, "p99_ttft_ms"))
    assert same["verdict"] == "no change"
    slower = occur(store, driver, clock, level(130.0, "p99_ttft_ms"))
    assert slower["verdict"] == "regression"
    assert slower["metrics"][0]["change_pct"] == pytest.approx(30.0)
    assert state(slower, "p99_ttft_ms@c8") == "regression"
    faster = occur(store, driver, clock, level(70.0, "p99_ttft_ms"))
    assert faster["verdict"] == "improvement" and state(faster, "p99_ttft_ms@c8") == "improvement"


def test_an_undecided_occurrence_after_regressions_keeps_the_state(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n")
    driver = WatchDriver(store, clock)
    occur(store, driver, clock, level(1000.0))
    for _ in range(3):
        assert occur(store, driver, clock, level(800.0))["verdict"] == "regression"
    noisy = occur(store, driver, clock, level(950.0, spread=0.2))  # 760..1140: undecided
    assert noisy["verdict"] == "undecided"
    assert state(noisy) == "regression" and noisy["state"]["output_throughput"]["since"] == 2
    watch = store.get_watch("nightly")
    assert watch is not None
    latest = store.latest_occurrences("nightly", 2)
    doc = watch_document(watch, store.watch_occurrences("nightly"), {}, latest)
    assert doc["watch_state"] == "regression" and doc["last_verdict"] == "undecided"
    back = occur(store, driver, clock, level(1000.0))
    assert back["verdict"] == "no change" and state(back) == "no change"


def test_a_short_history_with_a_24_percent_step_marks_a_change_point(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n  baseline: previous\n")
    driver = WatchDriver(store, clock)
    docs = [occur(store, driver, clock, level(v)) for v in [1000.0, 1001.0, 999.0] + [760.0] * 4]
    points = docs[-1]["change_points"]
    assert [(p["occurrence"], p["metric"], p["change_pct"]) for p in points] == [
        (4, "output_throughput", pytest.approx(-24.0, abs=0.1))
    ]
    assert points[0]["p"] < 0.001
    # the step: a regression against #3; the three after it are "no change" against the
    # previous one, yet the state holds (the change point, with a baseline past the step)
    assert [d["verdict"] for d in docs[3:]] == ["regression"] + ["no change"] * 3
    assert [state(d) for d in docs[3:]] == ["regression"] * 4


def test_a_slow_drift_under_previous_alerts(store: SqliteStore) -> None:
    """Issue 43: no verdict, alert or webhook used change points, so a drift of -1.5 % an
    occurrence under ``baseline: previous`` (each step inside the margin) never alerted."""
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n  baseline: previous\n")
    seen: list[str] = []
    driver = WatchDriver(store, clock, on_verdict=lambda w, o, v: seen.append(state(v)))
    docs = [occur(store, driver, clock, level(1000.0 * 0.985**i, spread=0.001)) for i in range(16)]
    assert "regression" not in [d["verdict"] for d in docs]  # never against the previous one
    assert state(docs[-1]) == "regression"
    assert docs[-1]["state"]["output_throughput"]["cause"].startswith("change point before #")
    assert seen[-1] == "regression"  # the webhook's hook had it
    text = verdict_text("nightly", 16, docs[-1])
    assert "\noutput_throughput: regression since #" in text and "(change point before #" in text


def test_a_first_occurrence_with_one_bad_launch_is_pooled_not_trusted(
    store: SqliteStore,
) -> None:
    """Issue 43: a baseline of 704, 891 and 823 tok/s judged 18 later occurrences undecided and
    never called a real -10 % step."""
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n")
    driver = WatchDriver(store, clock)
    bad = [704.0, 891.0, 823.0]
    first = occur(store, driver, clock, lambda k: {"output_throughput": bad[k - 1]})
    assert first["verdict"] == "baseline"
    second = occur(store, driver, clock, level(860.0))
    assert second["verdict"] == "baseline" and second["pool"] == [1, 2]
    why = "the first occurrence's output_throughput spreads CV 12 % > 5 %"
    assert f"pooled into the baseline with #1 ({why})" in second["reason"]
    webhook = verdict_text("nightly", 2, second).splitlines()[1]  # Slack's &, <, > escaped
    assert webhook == second["reason"].replace(">", "&gt;")
    assert first["reason"] == ""  # a plain first baseline says nothing more
    docs = [occur(store, driver, clock, level(860.0)) for _ in range(2)]
    assert docs[0]["verdict"] == "baseline" and docs[1]["verdict"] in ("no change", "undecided")
    assert docs[-1]["baseline_pool"] == [1, 2, 3]
    step = occur(store, driver, clock, level(774.0))  # -10 %: called at once
    assert step["verdict"] == "regression" and state(step) == "regression"


def test_a_baseline_that_stays_too_noisy_is_said_and_replaced(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n")
    driver = WatchDriver(store, clock)
    wild = level(1000.0, spread=0.3)
    docs = [occur(store, driver, clock, wild) for _ in range(6)]
    assert [d["verdict"] for d in docs] == ["baseline"] * 6
    assert "stayed too noisy to judge against after 5 occurrences" in docs[5]["reason"]
    assert docs[5]["pool"] == [6]  # a new baseline starts


def test_one_launch_an_occurrence_is_judged_over_pooled_occurrences(store: SqliteStore) -> None:
    clock = Clock(1000.0)
    add(store, clock, "  every: 5s\n  launches: 1\n  margin: 5%\n  metrics: [output_throughput]\n")
    driver = WatchDriver(store, clock)
    values = [1000.0, 1004.0, 996.0, 1002.0, 998.0, 800.0, 802.0, 798.0]
    docs = [occur(store, driver, clock, constant(v)) for v in values]
    assert [d["verdict"] for d in docs[:3]] == ["baseline"] * 3  # 3 launches pooled
    assert "has 1 launch (at least 3)" in docs[1]["reason"]
    assert docs[4]["verdict"] == "no change"
    assert "launches: 1: judged over #4-#5 pooled as replicates" in docs[4]["reason"]
    assert state(docs[-1]) == "regression"


def test_one_launch_with_a_previous_baseline_is_refused_with_the_reason() -> None:
    from tunelab.controller.spec.errors import SpecError

    text = (
        SPEC.split("watch:")[0]
        + "watch:\n  every: 5s\n  launches: 1\n"
        + ("  metrics: [output_throughput]\n  baseline: previous\n")
    )
    with pytest.raises(SpecError) as refused:
        watch_from_text(text)
    assert "watch.launches" in str(refused.value) and "no spread" in str(refused.value)


class CountingStore:
    """The store, recording the most occurrences any one read asked for."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self.largest = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def watch_occurrences(self, name: str, after: int = 0, limit: int = 1000) -> list[Any]:
        self.largest = max(self.largest, limit)
        return self._store.watch_occurrences(name, after, limit)

    def occurrences_before(self, name: str, before: int, limit: int) -> Sequence[OccurrenceRow]:
        self.largest = max(self.largest, limit)
        return self._store.occurrences_before(name, before, limit)


def test_judging_reads_a_bounded_window_not_the_history(store: SqliteStore) -> None:
    """Issue 45: every tick re-read the whole history while an occurrence was pending."""
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n")
    counting = CountingStore(store)
    driver = WatchDriver(counting, clock)  # type: ignore[arg-type]
    for _ in range(4):
        occur(store, driver, clock, level(1000.0))
    tick(store, driver)  # one pending and running: nothing is read but its experiments
    assert counting.largest <= 100


def test_a_controller_runs_at_most_its_cap_of_watches_and_says_why(store: SqliteStore) -> None:
    from tunelab.controller.store.base import StoreConflict

    clock = Clock(1000.0)
    row = add(store, clock, WATCH + "  metrics: [output_throughput]\n")
    store.watches.insert_watch(replace(row, name="second"), cap=2)
    with pytest.raises(StoreConflict) as refused:
        store.watches.insert_watch(replace(row, name="third"), cap=2)
    assert "holds 2 watches, the most it runs" in str(refused.value)
    assert "tunelab watch rm NAME" in str(refused.value)
    assert [w.name for w in store.list_watches()] == ["nightly", "second"]


def test_a_history_written_before_pools_finds_its_first_baseline() -> None:
    """Verdicts stored by the previous release have no "pool": the occurrence judged
    "baseline" is the pool."""
    from tunelab.controller.watches.judging import build_history
    from tunelab.controller.watches.spec import WatchSpec

    old = [
        OccurrenceRow("w", 1, "g1", 1.0, 1.0, {"verdict": "undecided", "launches": 0}, 2.0),
        OccurrenceRow("w", 2, "g2", 2.0, 2.0, {"verdict": "baseline", "launches": 3}, 3.0),
        OccurrenceRow("w", 3, "g3", 3.0, 3.0, {"verdict": "no change", "launches": 3}, 4.0),
    ]
    spec = WatchSpec("5s", 5.0, "", 3, "first", 0, ("output_throughput",), 0.02)
    history = build_history(
        spec,
        4,
        lambda before, limit: old[max(0, before - 1 - limit) : before - 1],
        lambda after, limit: old[after : after + limit],
    )
    assert [o.number for o in history.pool] == [2]
    assert [o.number for o in history.window] == [1, 2, 3]


def test_a_metric_no_launch_reports_is_said_not_silently_blind(store: SqliteStore) -> None:
    """A NAME@KEY for a point the sweep does not have: every occurrence says so."""
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput, output_throughput@c16]\n")
    driver = WatchDriver(store, clock)
    docs = [occur(store, driver, clock, level(1000.0)) for _ in range(2)]
    assert docs[1]["verdict"] == "baseline"
    assert "output_throughput@c16 has 0 launches (at least 3)" in docs[1]["reason"]
