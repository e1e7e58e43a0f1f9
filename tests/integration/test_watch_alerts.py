"""A watch's /metrics series and its alert rules with promtool: the collector's exposition
passes ``promtool check metrics`` and carries the latest verdict, change and interval; the
shipped alert file passes ``promtool check rules`` and its own ``promtool test rules``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from tests.support.daemon_proc import REPO
from tests.unit.controller.test_watch_driver import Clock, add, run_queued, tick
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.watches.alerts import WatchCollector
from tunelab.controller.watches.driver import WatchDriver

ALERTS = REPO / "deploy" / "prometheus" / "alerts"


def promtool(*argv: str, text: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool missing: install Debian's prometheus package (.ci/run does)"
    return subprocess.run(
        [binary, *argv], input=text, capture_output=True, text=True, timeout=60, cwd=ALERTS
    )


def test_the_series_of_a_regression_pass_promtool_and_say_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "c.db")
    store.add_host(HostRow(name="h1", address="h1:1"))
    clock = Clock(1000.0)
    add(store, clock)
    driver = WatchDriver(store, clock)
    for speed in (1000.0, 800.0):
        tick(store, driver)
        run_queued(store, speed)
        tick(store, driver)
        clock.now += 5.0
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(store))
    labels = {"watch": "nightly", "metric": "output_throughput"}
    get = registry.get_sample_value
    assert get("tunelab_watch_state", {**labels, "state": "regression"}) == 1.0
    assert get("tunelab_watch_state", {**labels, "state": "no_change"}) == 0.0
    watch = store.get_watch("nightly")
    assert watch is not None
    due = get("tunelab_watch_next_due_timestamp_seconds", {"watch": "nightly"})
    assert due == watch.next_due
    assert get("tunelab_watch_verdict", {**labels, "verdict": "regression"}) == 1.0
    assert get("tunelab_watch_verdict", {**labels, "verdict": "no_change"}) == 0.0
    change = get("tunelab_watch_change_ratio", labels)
    lower = get("tunelab_watch_change_lower_ratio", labels)
    upper = get("tunelab_watch_change_upper_ratio", labels)
    assert change is not None and lower is not None and upper is not None
    assert lower < change < upper and -0.21 < change < -0.19
    assert get("tunelab_watch_period_seconds", {"watch": "nightly"}) == 5.0
    assert get("tunelab_watch_active", {"watch": "nightly"}) == 1.0
    assert get("tunelab_watch_margin_ratio", {"watch": "nightly"}) == 0.02
    started = store.watch_occurrences("nightly")[-1].started_at
    assert get("tunelab_watch_last_occurrence_timestamp_seconds", {"watch": "nightly"}) == started
    checked = promtool("check", "metrics", text=generate_latest(registry).decode())
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked


def test_the_alert_rules_pass_promtool_check_and_their_tests() -> None:
    checked = promtool("check", "rules", "watches.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 rules found" in checked.stdout
    tested = promtool("test", "rules", "watches_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
