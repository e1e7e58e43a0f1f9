"""The search driver over a real SQLite file (tmp_path) and a synthetic serving surface: each
strategy finds the optimum, failures teach (OOM-implied skip, never retried), budget, cancel,
no feasible point, a restart resumes without re-running a trial, and two hosts share trials.

Trials are "run" by this test: it places each queued experiment (create_attempt) and ends it
with a result document computed from the surface, as an agent would report it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.summary import search_document
from tunelab.controller.states import AttemptState, ExperimentState, SearchState, TrialState
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.store.search_models import SearchRow

BASE = """
name: s
server:
  command: [sim]
  flags: {--port: "{port}", --max-num-seqs: 16, --chunk: 512}
  port: auto
  ready: {model: m}
benchmark: {requests: 10, input_len: 8, output_len: 8}
"""
SEARCH = """
search:
  space:
    server.flags.--max-num-seqs: [16, 32, 64, 128]
    server.flags.--chunk: [512, 2048]
  objective: {maximize: output_throughput}
  slo: {tpot_p99_ms: 50}
  load: {concurrency: [4, 16, 64]}
  budget: {trials: 40}
  strategy: STRATEGY
"""


def surface(flags: dict[str, Any], concurrency: int) -> dict[str, float]:
    """Throughput rises with batch size up to the concurrency; TPOT rises with the batch and
    with large chunks (and a little with the cap): the optimum under TPOT p99 <= 50 ms is
    seqs 64, chunk 512, c=64."""
    seqs = int(flags["--max-num-seqs"])
    batch = min(seqs, concurrency)
    tpot = 10 + 0.6 * batch + 0.02 * seqs + (8 if int(flags["--chunk"]) > 1024 else 0)
    return {"output_throughput": batch * 1000 / tpot, "p99_tpot_ms": tpot}


def run_queued(
    store: SqliteStore, host: str = "h1", fail: Callable[[dict[str, Any]], str] = lambda f: ""
) -> list[str]:
    """Place and finish every queued experiment; returns their ids."""
    done = []
    for exp in store.list_experiments([ExperimentState.QUEUED], limit=1000):
        attempt = store.create_attempt(exp.id, host, [0], 1.0)  # takes the turn itself
        flags = exp.spec["server"]["flags"]
        reason = fail(flags)
        if reason:
            store.finish_attempt(
                attempt.id,
                AttemptState.FAILED_STARTUP,
                [AttemptState.DISPATCHING],
                result={"failure_reason": reason},  # as dispatch keeps it: both places
                failure_reason=reason,
                message="server exited",
            )
        else:
            points = [
                {"concurrency": c, "point_index": i, **surface(flags, c)}
                for i, c in enumerate(exp.spec["benchmark"]["concurrency"])
            ]
            store.finish_attempt(
                attempt.id,
                AttemptState.SUCCEEDED,
                [AttemptState.DISPATCHING],
                result={"points": points},
            )
        done.append(exp.id)
    return done


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return with_hosts(SqliteStore(tmp_path / "c.db"))


def with_hosts(store: SqliteStore) -> SqliteStore:
    """The store with hosts h0 and h1: attempts are placed only on registered hosts."""
    for name in ("h0", "h1"):
        store.add_host(HostRow(name=name, address=f"{name}:1"))
    return store


def submit(store: SqliteStore, text: str, group: str = "g-1") -> SearchRow:
    found = search_from_text(text)
    assert found is not None
    row = SearchRow(group, found.name, SearchState.RUNNING, found.spec.to_dict(), found.base, 0.0)
    store.insert_search(row)
    return row


def until_done(store: SqliteStore, driver: SearchDriver, **kw: Any) -> dict[str, Any]:
    for _ in range(100):
        driver.tick()
        search = store.get_search("g-1")
        assert search is not None
        if search.state != "RUNNING":
            return search_document(search, store.search_trials("g-1"))
        run_queued(store, **kw)
    raise AssertionError("the search did not end")


OPTIMUM = {"server.flags.--max-num-seqs": 64, "server.flags.--chunk": 512}


@pytest.mark.parametrize("strategy", ["grid", "random", "successive-halving", "tpe"])
def test_each_strategy_finds_the_optimum_of_a_small_surface(
    store: SqliteStore, strategy: str
) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", strategy))
    doc = until_done(store, SearchDriver(store, lambda: 1.0))
    assert doc["state"] == "DONE", doc["message"]
    assert doc["best"]["params"] == OPTIMUM
    assert doc["best"]["load"] == {"concurrency": 64}
    launched = [t for t in doc["trials"] if t["experiment"] and not t["race"] and not t["drift"]]
    keys = [json.dumps(t["params"], sort_keys=True) for t in launched if t["rung"] == 0]
    assert len(keys) == len(set(keys)), "no candidate launched twice at one rung"
    assert doc["trials"][0]["params"] == {
        "server.flags.--max-num-seqs": 16,
        "server.flags.--chunk": 512,
    }, "the default point goes first"
    rec = doc["recommendation"]
    assert rec["argv"][:1] == ["sim"] and "--max-num-seqs" in rec["argv"]
    assert rec["argv"][rec["argv"].index("--max-num-seqs") + 1] == "64"
    assert rec["spec"] == {"server": {"flags": {"--max-num-seqs": 64, "--chunk": 512}}}
    assert rec["effect"]["metric"] == "output_throughput"
    assert rec["effect"]["relative_change"] > 0


def test_search_show_json_has_the_issue_shape(store: SqliteStore) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    doc = until_done(store, SearchDriver(store, lambda: 1.0))
    assert doc["state"] in ("RUNNING", "DONE", "FAILED", "CANCELLED")
    assert set(doc["best"]) >= {"params", "objective", "interval", "load"}
    assert all(path.startswith("server.flags.") for path in doc["best"]["params"])
    assert isinstance(doc["best"]["objective"], float)
    for trial in doc["trials"]:
        assert set(trial) >= {"params", "state", "objective", "failure_reason"}
        assert trial["objective"] is None or isinstance(trial["objective"], float)
    json.dumps(doc)


def test_trials_and_the_recommendation_keep_the_flags_in_the_specs_order(
    store: SqliteStore,
) -> None:
    """Flags are passed, and shown, as the user wrote them (--port, --max-num-seqs, --chunk):
    the stored base document must not come back sorted."""
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    doc = until_done(store, SearchDriver(store, lambda: 1.0))
    written = ["--port", "--max-num-seqs", "--chunk"]
    for trial in doc["trials"]:
        experiment = store.get_experiment(trial["experiment"])
        assert experiment is not None
        assert list(experiment.spec["server"]["flags"]) == written
    argv = doc["recommendation"]["argv"]
    assert [a for a in argv if a.startswith("--")] == written


def test_an_oom_skips_larger_values_and_is_never_retried(store: SqliteStore) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid") + "  parallel: 1\n")
    oom = lambda flags: "CUDA_OOM" if int(flags["--max-num-seqs"]) >= 64 else ""  # noqa: E731
    doc = until_done(store, SearchDriver(store, lambda: 1.0), fail=oom)
    by_params = {
        (t["params"]["server.flags.--max-num-seqs"], t["params"]["server.flags.--chunk"]): t
        for t in doc["trials"]
    }
    assert by_params[(64, 512)]["failure_reason"] == "CUDA_OOM"
    assert by_params[(128, 512)]["state"] == "SKIPPED"
    assert by_params[(128, 512)]["failure_reason"] == "IMPLIED_OOM"
    assert by_params[(128, 512)]["experiment"] is None
    assert "implied OOM by trial" in by_params[(128, 512)]["message"]
    strategy = [t for t in doc["trials"] if not t["race"] and not t["drift"]]
    assert len(strategy) == 8 and sum(1 for t in strategy if t["experiment"]) == 6
    assert doc["best"]["params"]["server.flags.--max-num-seqs"] == 32


def test_the_trial_budget_ends_the_search_with_a_message(store: SqliteStore) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid").replace("trials: 40", "trials: 3"))
    doc = until_done(store, SearchDriver(store, lambda: 1.0))
    assert doc["state"] == "DONE"
    assert "budget of 3 trials spent" in doc["message"]
    assert (
        sum(1 for t in doc["trials"] if t["experiment"] and not t["race"] and not t["drift"]) == 3
    )


def test_the_duration_budget_cancels_what_runs(store: SqliteStore) -> None:
    now = [0.0]
    submit(
        store,
        BASE + SEARCH.replace("STRATEGY", "grid").replace("trials: 40", "trials: 40, duration: 1h"),
    )
    driver = SearchDriver(store, lambda: now[0])
    driver.tick()
    run_queued(store)
    driver.tick()  # 4 more queued
    now[0] = 3601.0
    driver.tick()
    search = store.get_search("g-1")
    assert search is not None and search.state == "DONE"
    assert "duration budget 3600s spent" in search.message
    states = [t.state for t in store.search_trials("g-1")]
    assert states.count(TrialState.CANCELLED) == 4 and states.count(TrialState.DONE) == 4
    assert all(
        e.state is ExperimentState.CANCELLED
        for e in store.list_experiments([ExperimentState.QUEUED, ExperimentState.CANCELLED])
    )


def test_cancel_stops_the_search_and_its_queued_trials(store: SqliteStore) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", "random"))
    driver = SearchDriver(store, lambda: 1.0)
    driver.tick()
    store.request_search_cancel("g-1")
    driver.tick()
    search = store.get_search("g-1")
    assert search is not None and search.state == "CANCELLED"
    assert search.message.startswith("cancelled")
    assert not store.list_experiments([ExperimentState.QUEUED])
    assert {t.state for t in store.search_trials("g-1")} == {"CANCELLED"}
    driver.tick()
    assert not store.list_experiments([ExperimentState.QUEUED]), "nothing queued after"


def test_no_feasible_point_fails_the_search_and_says_so(store: SqliteStore) -> None:
    submit(
        store,
        BASE + SEARCH.replace("STRATEGY", "grid").replace("tpot_p99_ms: 50", "tpot_p99_ms: 5"),
    )
    doc = until_done(store, SearchDriver(store, lambda: 1.0))
    assert doc["state"] == "FAILED"
    assert "no feasible point" in doc["message"] and doc["best"] is None
    assert all(t["slo_margins"]["tpot_p99_ms"] < 0 for t in doc["trials"])


def test_a_restarted_driver_resumes_without_running_a_finished_trial_again(
    tmp_path: Path,
) -> None:
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    SearchDriver(store, lambda: 1.0).tick()
    first = run_queued(store)
    store.close()  # the controller dies; a new one opens the same file
    store = SqliteStore(tmp_path / "c.db")
    doc = until_done(store, SearchDriver(store, lambda: 2.0))
    experiments = [t["experiment"] for t in doc["trials"]]
    assert experiments[:4] == first
    assert len(experiments) == len(set(experiments))
    assert sum(1 for t in doc["trials"] if not t["race"] and not t["drift"]) == 8
    assert doc["best"]["params"] == OPTIMUM


def test_two_hosts_share_the_trials(store: SqliteStore) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    driver = SearchDriver(store, lambda: 1.0)
    driver.tick()
    queued = store.list_experiments([ExperimentState.QUEUED])
    assert len(queued) == 4, "parallel: 4 trials in flight"
    for i, exp in enumerate(queued):
        store.create_attempt(exp.id, f"h{i % 2}", [0], 1.0)
    hosts = {a.host for e in queued for a in store.attempts_for(e.id)}
    assert hosts == {"h0", "h1"}


def test_successive_halving_drops_a_candidate_clearly_below_the_incumbent() -> None:
    """Over launches: at rung 1 each survivor has two launches (rung 0's and rung 1's), and one
    whose upper bound lies below the incumbent's lower bound is not promoted again."""
    from tunelab.controller.search.space import Load, Param, SearchSpec
    from tunelab.controller.search.strategies import SuccessiveHalving, TrialView, key

    spec = SearchSpec(
        space=(Param("server.flags.--a", "choice", (1, 2, 3, 4, 5, 6)),),
        objective="output_throughput",
        maximize=True,
        slo={},
        load=Load("concurrency", False, 0.0, (1.0,)),
        strategy="successive-halving",
        max_trials=27,
        eta=2,
    )
    launches = {1: (100.0, 101.0), 2: (99.0, 100.0), 3: (60.0, 61.0), 4: (10.0,)}
    launches |= {5: (5.0,), 6: (1.0,)}
    history: list[TrialView] = []
    for a, values in launches.items():
        for rung, value in enumerate(values):
            number = len(history) + 1
            history.append(
                TrialView(number, {"server.flags.--a": a}, rung, "DONE", value, (value,))
            )
    members = [{"server.flags.--a": a} for a in (1, 2, 3)]
    by_key: dict[str, list[TrialView]] = {}
    for t in history:
        by_key.setdefault(key(t.params), []).append(t)
    # the top 1/eta of 1, 2, 3 are 1 and 2: 3's upper bound is below 1's lower bound anyway
    promoted = SuccessiveHalving.promote(spec, members, by_key, 1)
    assert [p["server.flags.--a"] for p in promoted] == [1, 2]
    answer = SuccessiveHalving().ask(spec, history, 10)
    assert [(p.params["server.flags.--a"], p.rung) for p in answer.proposals] == [(1, 2), (2, 2)]


def test_two_points_of_one_launch_make_no_interval_in_successive_halving() -> None:
    """Rung 0 gives one launch per candidate: however many answer points it has, no interval
    (the old code made one from the points of one launch and dropped a candidate with it)."""
    from tunelab.controller.search.space import Load, Param, SearchSpec
    from tunelab.controller.search.strategies import SuccessiveHalving, TrialView, key

    spec = SearchSpec(
        space=(Param("server.flags.--a", "choice", (1, 2, 3, 4, 5, 6)),),
        objective="output_throughput",
        maximize=True,
        slo={},
        load=Load("concurrency", False, 0.0, (1.0,)),
        strategy="successive-halving",
        max_trials=12,
        eta=2,
    )
    points = {1: (100.0, 101.0), 2: (99.0, 100.0), 3: (60.0, 61.0), 4: (10.0, 11.0)}
    points |= {5: (5.0, 6.0), 6: (1.0, 2.0)}
    history = [
        TrialView(i, {"server.flags.--a": a}, 0, "DONE", sum(s) / 2, s)
        for i, (a, s) in enumerate(points.items(), start=1)
    ]
    by_key = {key(t.params): [t] for t in history}
    promoted = SuccessiveHalving.promote(spec, [t.params for t in history], by_key, 0)
    assert [p["server.flags.--a"] for p in promoted] == [1, 2, 3]


def test_a_failure_of_the_host_is_launched_again_and_the_search_goes_on(
    store: SqliteStore,
) -> None:
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid").replace("trials: 40", "trials: 8"))
    failed: list[int] = []

    def port_taken_once(flags: dict[str, Any]) -> str:
        if int(flags["--max-num-seqs"]) == 16 and int(flags["--chunk"]) == 512 and not failed:
            failed.append(1)
            return "ADDRESS_IN_USE"
        return ""

    doc = until_done(store, SearchDriver(store, lambda: 1.0), fail=port_taken_once)
    first = {"server.flags.--max-num-seqs": 16, "server.flags.--chunk": 512}
    default = [
        t for t in doc["trials"] if t["params"] == first and not t["race"] and not t["drift"]
    ]
    assert [t["failure_reason"] for t in default] == ["ADDRESS_IN_USE", None]
    assert default[1]["message"] == "launched again: the last try failed for the host"
    assert doc["best"]["params"] == OPTIMUM
    assert doc["recommendation"]["effect"]["default_objective"] is not None
    strategy = [t for t in doc["trials"] if not t["race"] and not t["drift"]]
    assert len(strategy) == 9, "the relaunch does not spend the budget of 8"


def test_successive_halving_with_oom_trials_promotes_at_least_one() -> None:
    """examples/search-sim.yaml with budget 8: rung 0 has 6 candidates, 2 of them CUDA_OOM.
    The old code kept ceil(6/3) of them, dropped the runner-up on an interval made from the two
    answer points of one launch, and stopped at one ("every candidate tried"); OOM'd trials are
    not candidates, and one survivor is still promoted."""
    from tunelab.controller.search.space import Load, Param, SearchSpec
    from tunelab.controller.search.strategies import SuccessiveHalving, TrialView

    spec = SearchSpec(
        space=(
            Param("server.flags.--max-num-batched-tokens", "choice", (512, 4096)),
            Param("server.flags.--max-num-seqs", "choice", (8, 16, 32, 64, 128)),
        ),
        objective="output_throughput",
        maximize=True,
        slo={"tpot_p99_ms": 25.0},
        load=Load("concurrency", True, 128.0),
        strategy="successive-halving",
        max_trials=8,
    )
    members = SuccessiveHalving().candidates(spec)
    assert len(members) == 6
    throughput = {8: 740.0, 16: 1380.0, 32: 2420.0, 64: 3900.0}
    history = []
    for i, m in enumerate(members, start=1):
        seqs = m["server.flags.--max-num-seqs"]
        if seqs > 64:
            history.append(TrialView(i, m, 0, "FAILED"))
        else:
            x = throughput[seqs]
            history.append(TrialView(i, m, 0, "DONE", x, (x * 0.99, x * 1.01)))
    answer = SuccessiveHalving().ask(spec, history, 8)
    feasible = sum(1 for t in history if t.objective is not None)
    assert len(answer.proposals) == -(-feasible // 3) >= 1
    assert {p.rung for p in answer.proposals} == {1}
    best = max((t for t in history if t.objective), key=lambda t: t.objective or 0.0)
    assert answer.proposals[0].params == best.params
    only = [t if t.number == best.number else TrialView(t.number, t.params, 0, "FAILED")
            for t in history]  # fmt: skip
    answer = SuccessiveHalving().ask(spec, only, 8)
    assert [(p.params, p.rung) for p in answer.proposals] == [(best.params, 1)]
    done = [*only, TrialView(7, best.params, 1, "DONE", 3900.0, (3900.0,))]
    assert SuccessiveHalving().ask(spec, done, 8).exhausted, "rung 1 is the budget's last"
