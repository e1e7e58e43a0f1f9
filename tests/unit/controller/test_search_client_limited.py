"""A launch whose load generator reported itself saturated is not evidence (issue 35 item 4):
the trial fails with CLIENT_SATURATED when a point its value rests on says so (a point it does
not rest on is ignored), is measured again once, counts as no failure of a race's contender,
and the answer says what was excluded; a starved one is kept and said. Through the driver over
a real SQLite file, with the test's surface as the agents' results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.controller import test_search_driver as harness
from tests.unit.controller.test_search_driver import (
    BASE,
    OPTIMUM,
    SEARCH,
    submit,
    surface,
    until_done,
    with_hosts,
)
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.search.space import Load, Param, SearchSpec
from tunelab.controller.search.trials import outcome
from tunelab.controller.states import AttemptState, ExperimentState, TrialState
from tunelab.controller.store import SqliteStore
from tunelab.controller.store.models import AttemptRow, ExperimentRow

SPEC = SearchSpec(
    space=(Param("server.flags.--max-num-seqs", "choice", (16, 32)),),
    objective="output_throughput",
    maximize=True,
    slo={"tpot_p99_ms": 50.0},
    load=Load("concurrency", False, 0.0, (4.0, 64.0)),
    strategy="grid",
    max_trials=2,
)
REASON = "the client used 97% of a core over the run (>= 90%): it is near saturation"


def saturated(point: dict[str, Any], state: str = "saturated") -> dict[str, Any]:
    check = {"client_saturated": state == "saturated", "client_starved": state == "starved",
             "reasons": [REASON]}  # fmt: skip
    return {**point, **{k: v for k, v in check.items() if k != "reasons"},
            "client_check": check}  # fmt: skip


def ended(points: list[dict[str, Any]], fixed_load: bool = False, **result: Any) -> Any:
    exp = ExperimentRow("x-1", "g-1", "s/t1", ExperimentState.SUCCEEDED, {})
    attempt = AttemptRow("a-1", "x-1", 1, "h1", AttemptState.SUCCEEDED,
                         result={"points": points, **result})  # fmt: skip
    return outcome(SPEC, exp, [attempt], fixed_load=fixed_load)


LOW = {"concurrency": 4, "point_index": 0, "output_throughput": 90.0, "p99_tpot_ms": 20.0}
HIGH = {"concurrency": 64, "point_index": 1, "output_throughput": 400.0, "p99_tpot_ms": 45.0}
OVER = {**HIGH, "p99_tpot_ms": 80.0}  # misses the SLO


def test_the_chosen_point_saturated_fails_the_trial_with_the_bench_reasons() -> None:
    found = ended([LOW, saturated(HIGH)])
    assert (found.state, found.failure_reason, found.objective) == (
        "FAILED", "CLIENT_SATURATED", None
    )  # fmt: skip
    assert found.details["message"] == (
        f"the load generator was saturated at concurrency 64: {REASON}: not evidence"
    )
    # starved (kept from the CPU by others, as on any shared machine): kept, and said
    starved = ended([LOW, saturated(HIGH, "starved")])
    assert (starved.state, starved.objective) == ("DONE", 400.0)
    assert (
        starved.details["client_starved"]
        == f"the load generator was starved at concurrency 64: {REASON}"
    )


def test_a_saturated_point_the_value_does_not_rest_on_is_ignored() -> None:
    found = ended([LOW, saturated(OVER)])  # c=64 missed the SLO: c=4 is the answer
    assert (found.state, found.objective) == ("DONE", 90.0)
    fixed = ended([LOW, saturated(HIGH)], fixed_load=True)  # a race launch measures the first
    assert (fixed.state, fixed.objective) == ("DONE", 90.0)
    assert ended([saturated(LOW)], fixed_load=True).failure_reason == "CLIENT_SATURATED"


def test_a_load_search_is_judged_on_its_answer_points() -> None:
    search = {"answer_points": [0], "met": True}
    assert ended([saturated(LOW), OVER], load_search=search).failure_reason == "CLIENT_SATURATED"
    assert ended([LOW, saturated(OVER)], load_search=search).objective == 90.0


def test_a_saturated_launch_is_measured_again_once_and_the_answer_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default saturates its client once (measured again, then fine); 32/2048 always does
    (measured twice, then left out); the race's first launch of the optimum saturates too (no
    failure of the contender: the race goes on). The answer is the optimum all the same."""
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    seen: dict[str, int] = {}

    def limited(flags: dict[str, Any], concurrency: int) -> dict[str, Any]:
        point = surface(flags, concurrency)
        config = f"{flags['--max-num-seqs']}/{flags['--chunk']}"
        seen[config] = seen.get(config, 0) + 1
        first_default = config == "16/512" and seen[config] <= 3  # its first launch's 3 points
        race_optimum = config == "64/512" and seen[config] == 4  # its first race launch
        if first_default or config == "32/2048" or race_optimum:
            return saturated(point)
        return point

    monkeypatch.setattr(harness, "surface", limited)
    doc = until_done(store, SearchDriver(store, lambda: 1.0))
    assert doc["state"] == "DONE", doc["message"]
    assert doc["best"]["params"] == OPTIMUM
    by_config: dict[str, list[dict[str, Any]]] = {}
    for t in doc["trials"]:
        if not t["race"] and not t["drift"]:
            p = t["params"]
            key = f"{p['server.flags.--max-num-seqs']}/{p['server.flags.--chunk']}"
            by_config.setdefault(key, []).append(t)
    default = by_config["16/512"]
    assert [t["failure_reason"] for t in default] == ["CLIENT_SATURATED", None]
    assert default[1]["message"] == "measured again: the load generator was short of CPU last time"
    assert [t["failure_reason"] for t in by_config["32/2048"]] == ["CLIENT_SATURATED"] * 2
    excluded = [w for w in doc["warnings"] if "excluded" in w]
    assert len(excluded) == 4
    raced = [t for t in doc["trials"] if t["race"] and t["params"] == OPTIMUM]
    assert raced[0]["failure_reason"] == "CLIENT_SATURATED"
    assert all(t["state"] == "DONE" for t in raced[1:]) and len(raced) >= 2
    assert doc["best"]["verdict"] == "better"
    assert excluded[0] == (
        f"trial {default[0]['number']} excluded: the load generator was saturated at "
        f"concurrency 16: {REASON}: not evidence; measured again as trial {default[1]['number']}"
    )


def test_starved_launches_are_one_warning_line() -> None:
    from tunelab.controller.search.answer import warnings
    from tunelab.controller.store.search_models import TrialRow

    rows = []
    for number in (1, 2, 3):
        row = TrialRow("g-1", number, {}, TrialState.DONE, 1.0)
        row.details = {"client_starved": f"the load generator was starved at concurrency {number}"}
        rows.append(row)
    rows[1].details = {}
    line = (
        "trials 1, 3: kept, though the load generator was starved of CPU by other processes "
        "(the first: the load generator was starved at concurrency 1); their figures may be low"
    )
    assert warnings(SPEC, rows) == [line]


def test_a_drift_launch_of_the_same_configuration_is_no_relaunch_of_a_saturated_trial() -> None:
    from tunelab.controller.search.driver import retries, superseded
    from tunelab.controller.store.search_models import TrialRow

    first = TrialRow("g-1", 1, {"a": 1}, TrialState.FAILED, 1.0, failure_reason="CLIENT_SATURATED")
    later = TrialRow("g-1", 2, {"a": 1}, TrialState.RUNNING, 1.0)
    later.phase = "drift_start"
    assert not superseded(first, [first, later])
    assert [p.params for p in retries([first, later])] == [{"a": 1}]
    again = TrialRow("g-1", 3, {"a": 1}, TrialState.RUNNING, 1.0)
    assert superseded(first, [first, later, again]) and retries([first, later, again]) == []
