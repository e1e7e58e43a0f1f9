"""A watch's occurrences exported to a real MLflow server (tests/support/mlflow_server.py): one
run per judged occurrence with the watch, its number and baseline as parameters, the launch
means and change ratios as metrics and the verdict as a tag; exporting again writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mlflow_server import MlflowServer
from tests.unit.controller.test_watch_driver import Clock, add, run_queued, tick
from tunelab.analysis.mlflow.sink import MlflowSink
from tunelab.controller.mlflow.export import MlflowExporter
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.watches.driver import WatchDriver


@pytest.fixture
def mlflow(tmp_path: Path) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path / "mlflow").start()
    yield server
    server.stop()


def test_one_run_per_occurrence_with_its_verdict(tmp_path: Path, mlflow: MlflowServer) -> None:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    clock = Clock(1000.0)
    add(store, clock)
    driver = WatchDriver(store, clock)
    for speed, version in ((1000.0, "0.5.2"), (1001.0, "0.5.2"), (800.0, "0.5.3")):
        tick(store, driver)
        run_queued(store, speed, version)
        tick(store, driver)
        clock.now += 5.0
    assert [o.verdict and o.verdict["verdict"] for o in store.watch_occurrences("nightly")] == [
        "baseline", "no change", "regression",
    ]  # fmt: skip
    exporter = MlflowExporter(store, lambda: MlflowSink(mlflow.uri, "watches"), report=None)
    sink = MlflowSink(mlflow.uri, "watches")
    assert exporter.export_watches(sink) == 3
    runs = {
        r["tags"]["tunelab.key"]: r
        for r in mlflow.runs("watches")
        if r["tags"].get("tunelab.watch") == "nightly"
    }
    assert sorted(runs) == ["watch:nightly:1", "watch:nightly:2", "watch:nightly:3"]
    first, regression = runs["watch:nightly:1"], runs["watch:nightly:3"]
    assert first["params"] == {
        "watch": "nightly",
        "occurrence": "1",
        "baseline": "none",
        "group": store.watch_occurrences("nightly")[0].group,
    }
    assert first["tags"]["tunelab.verdict"] == "baseline"
    assert "output_throughput.change_ratio" not in first["metrics"]
    # launch k of 1..3 reports speed * (1 + k/1000): their mean is speed * 1.002
    assert first["metrics"]["output_throughput.mean"] == pytest.approx(1002.0)
    assert first["metrics"]["output_throughput.launches"] == 3.0
    assert regression["params"]["baseline"] == "1"
    assert regression["tags"]["tunelab.verdict"] == "regression"
    assert regression["tags"]["verdict.output_throughput"] == "regression"
    assert regression["tags"]["tunelab.changes"] == "engine: sglang 0.5.2 -> sglang 0.5.3"
    assert regression["metrics"]["output_throughput.mean"] == pytest.approx(801.6)
    change = regression["metrics"]["output_throughput.change_ratio"]
    assert change == pytest.approx(801.6 / 1002.0 - 1, abs=1e-3)  # -20 %
    lower = regression["metrics"]["output_throughput.change_lower_ratio"]
    upper = regression["metrics"]["output_throughput.change_upper_ratio"]
    assert lower < change < upper
    assert regression["info"]["status"] == "FINISHED"

    # again, from a fresh exporter (a restarted controller): found by key, nothing written
    again = MlflowExporter(store, lambda: MlflowSink(mlflow.uri, "watches"), report=None)
    assert again.export_watches(MlflowSink(mlflow.uri, "watches")) == 0
    assert exporter.export_watches(sink) == 0
    keys = [r["tags"].get("tunelab.key", "") for r in mlflow.runs("watches")]
    assert sorted(k for k in keys if k.startswith("watch:")) == sorted(runs)
