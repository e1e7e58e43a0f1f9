"""A search exported into a real MLflow server (issue 37.3): one parent run holding the answer
(best params, the objective with its interval, the SLOs, the verdict against the runner-up), a
child run per trial with that trial's attempts under it, no per-concurrency verdict tags; each
attempt run carries the benchmark settings; an unreachable server is one short line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli_first_hour import Lab
from tests.integration.test_first_hour_round3 import parked_search
from tests.support.mlflow_server import MlflowServer
from tests.support.ports import free_port
from tests.unit.controller.test_search_driver import BASE, SEARCH, submit, until_done, with_hosts
from tunelab.analysis.mlflow.sink import MlflowSink, MlflowUnavailable
from tunelab.controller.mlflow.export import MlflowExporter
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.store import SqliteStore


def by_key(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["tags"]["tunelab.key"]: r for r in runs}


def test_a_search_is_one_parent_with_its_answer_and_a_child_per_trial(
    mlflow: MlflowServer, tmp_path: Path
) -> None:
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    search = until_done(store, SearchDriver(store, lambda: 1.0))
    best = search["best"]
    assert best is not None and best["vs_runner_up"] is not None

    exporter = MlflowExporter(store, lambda: MlflowSink(mlflow.uri, "search"), report=None)
    assert exporter.export_pending() > 0
    runs = by_key(mlflow.runs("search"))
    parent = runs.pop("group:g-1")
    assert parent["params"]["design"] == "search"
    assert parent["params"]["slo"] == "p99 TPOT ≤ 50 ms"
    assert parent["params"]["objective"] == "maximize output_throughput"
    assert parent["tags"]["answer"] == search["answer"]
    assert parent["tags"]["best.trial"] == str(best["trial"])
    for path, value in best["params"].items():
        assert parent["tags"][f"best.{path.split('.', 2)[2]}"] == str(value)
    assert parent["metrics"]["best/output_throughput"] == pytest.approx(best["objective"])
    if best["interval"]:
        low, high = best["interval"]
        assert parent["metrics"]["best/output_throughput/ci95_low"] == pytest.approx(low)
        assert parent["metrics"]["best/output_throughput/ci95_high"] == pytest.approx(high)
    assert parent["tags"]["vs_runner_up.verdict"] == best["vs_runner_up"]["verdict"]
    assert parent["tags"]["vs_runner_up.trial"] == str(best["vs_runner_up"]["trial"])
    assert not [k for k in parent["tags"] if k.startswith("verdict/")], parent["tags"]
    assert not [k for k in parent["metrics"] if k.startswith("effect/")], parent["metrics"]

    trials = {k: r for k, r in runs.items() if k.startswith("trial:")}
    assert sorted(trials) == sorted(f"trial:g-1:{t['number']}" for t in search["trials"])
    for trial in search["trials"]:
        run = trials[f"trial:g-1:{trial['number']}"]
        assert run["tags"]["mlflow.parentRunId"] == parent["info"]["run_id"]
        for path, value in trial["params"].items():
            assert run["params"][path.split(".", 2)[2]] == str(value)
    attempts = {k: r for k, r in runs.items() if k.startswith("attempt:")}
    assert len(attempts) == len(search["trials"])
    trial_ids = {r["info"]["run_id"] for r in trials.values()}
    for run in attempts.values():
        assert run["tags"]["mlflow.parentRunId"] in trial_ids
        assert run["params"]["bench.requests"] == "10"
        assert run["params"]["bench.input_len"] == "8"
        assert not [k for k in run["tags"] if k.startswith("verdict.")], run["tags"]


def test_an_unreachable_tracking_uri_is_one_short_line() -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(MlflowUnavailable) as raised:
        MlflowSink(uri, "nowhere").experiment_id()
    assert (
        str(raised.value)
        == f"MLflow at {uri}: find experiment: cannot connect (Connection refused)"
    )


def test_tunelab_export_mlflow_of_a_search_names_it_a_search(
    mlflow: MlflowServer, tmp_path: Path
) -> None:
    """Through the real console script: a submitted search (parked on hosts nobody has, its
    first trial queued) exports as its search run with a trial run under it, by its name."""
    lab = Lab(tmp_path / "lab")
    try:
        submitted = lab.run("submit", str(parked_search(lab, "exported")), "--json")
        assert submitted.returncode == 0, submitted.stderr
        group = json.loads(submitted.stdout)["search_group"]
        done = lab.run(
            "export", "mlflow", "exported", "--tracking-uri", mlflow.uri, "--experiment", "cli"
        )
        assert done.returncode == 0, done.stderr
        runs = by_key(mlflow.runs("cli"))
        parent = runs[f"group:{group}"]
        assert parent["params"]["design"] == "search"
        assert parent["params"]["slo"] == "p99 TPOT ≤ 25 ms, p99 TTFT ≤ 150 ms"
        assert parent["tags"]["tunelab.state"] == "RUNNING"
        trial = runs[f"trial:{group}:1"]
        assert trial["tags"]["mlflow.parentRunId"] == parent["info"]["run_id"]
        assert trial["params"]["--max-num-seqs"] == "8"
        assert lab.run("search", "cancel", group).returncode == 0
    finally:
        lab.controller.terminate()
        lab.agent.terminate()
