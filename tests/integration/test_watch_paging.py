"""GetWatch over real gRPC on loopback: a page of occurrences (limit, before, summaries), each
metric's state and the change points in ``watch show --json``, and the report's window, all
through the CLI against a real controller service."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.served_controller import serve_controller
from tests.unit.controller.test_watch_driver import Clock
from tests.unit.controller.test_watch_states import WATCH, add, level, occur
from tunelab.common.serving import Daemon
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.watches.driver import WatchDriver
from tunelab.v1 import controller_pb2, controller_pb2_grpc

Served = tuple[Daemon, SqliteStore, controller_pb2_grpc.ControllerStub]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    clock = Clock(1000.0)
    add(store, clock, WATCH + "  metrics: [output_throughput]\n  baseline: previous\n")
    driver = WatchDriver(store, clock)
    for value in [1000.0, 1001.0, 999.0, 1000.5] + [760.0] * 4:  # a -24 % step at #5
        occur(store, driver, clock, level(value))
    with serve_controller(store) as daemon:
        channel = grpc.insecure_channel(f"127.0.0.1:{daemon.port}")
        try:
            yield daemon, store, controller_pb2_grpc.ControllerStub(channel)
        finally:
            channel.close()
            store.close()


def cli(daemon: Daemon, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunelab.cli", *argv, "--controller", f"127.0.0.1:{daemon.port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def page(stub: controller_pb2_grpc.ControllerStub, **kw: Any) -> dict[str, Any]:
    reply = stub.GetWatch(controller_pb2.GetWatchRequest(name="nightly", **kw), timeout=10)
    doc: dict[str, Any] = json.loads(reply.watch_json)
    return doc


def test_get_watch_pages_the_occurrences(served: Served) -> None:
    _, _, stub = served
    newest = page(stub, limit=3)
    assert [o["index"] for o in newest["occurrences"]] == [6, 7, 8]
    assert newest["page"] == {"first": 6, "last": 8, "total": 8, "older": True}
    older = page(stub, limit=3, before=6)
    assert [o["index"] for o in older["occurrences"]] == [3, 4, 5]
    oldest = page(stub, limit=3, before=3)
    assert [o["index"] for o in oldest["occurrences"]] == [1, 2]
    assert oldest["page"]["older"] is False
    # the summary and the state are the newest occurrence's, whatever the page
    assert oldest["occurrences_count"] == 8 and oldest["watch_state"] == "regression"
    summaries = page(stub, summaries=True)
    assert len(summaries["occurrences"]) == 8
    assert all("values" not in o and "provenance" not in o for o in summaries["occurrences"])
    assert summaries["occurrences"][-1]["means"]["output_throughput"] == pytest.approx(763.8)


def test_a_page_too_large_or_before_zero_is_refused_with_the_field(served: Served) -> None:
    _, _, stub = served
    for request, field in (({"limit": 1001}, "limit"), ({"before": -1}, "before")):
        with pytest.raises(grpc.RpcError) as refused:
            page(stub, **request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (refused.value.details() or "").startswith(f"{field}:")


def test_watch_show_json_has_the_state_per_metric_and_the_change_points(served: Served) -> None:
    daemon, _, _ = served
    shown = cli(daemon, "watch", "show", "nightly", "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["metric_states"]["output_throughput"]["state"] == "regression"
    assert doc["metric_states"]["output_throughput"]["since"] == 5
    assert [(p["occurrence"], p["metric"]) for p in doc["change_points"]] == [
        (5, "output_throughput")
    ]
    assert doc["change_points"][0]["change_pct"] == pytest.approx(-24.0, abs=0.1)
    assert 0 <= doc["change_points"][0]["p"] < 0.001
    text = cli(daemon, "watch", "show", "nightly", "--last", "2")
    assert text.returncode == 0, text.stderr
    assert "state output_throughput: regression since #5 (judged a regression)" in text.stdout
    assert "change point before #5: output_throughput -24" in text.stdout
    assert "(6 older occurrences: --before 7 shows them)" in text.stdout
    before = cli(daemon, "watch", "show", "nightly", "--last", "2", "--before", "3")
    assert "#1 " in before.stdout and "#2 " in before.stdout and "older" not in before.stdout
    listed = cli(daemon, "watch", "ls")
    assert "state: regression" in listed.stdout, listed.stdout


def test_report_writes_the_history_page_from_summaries(served: Served, tmp_path: Path) -> None:
    daemon, _, _ = served
    out = tmp_path / "page.html"
    done = cli(daemon, "report", "nightly", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    html = out.read_text()
    assert "8 occurrences" in html and 'class="change-point"' in html
