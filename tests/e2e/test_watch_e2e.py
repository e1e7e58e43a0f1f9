"""E2E: a watch on real processes — controller, agent and simulator servers on loopback. The
simulator reads an "upgrade" file at each start (--speed-file): no regression is called before
the file slows it down, a regression within two occurrences after; a controller killed with
SIGKILL between occurrences neither skips nor doubles one. The upgrade file also names the
engine version, so the occurrences after it say what changed; a real Prometheus scrapes the
controller with deploy/prometheus/alerts/watches.yml loaded and fires the regression alert."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Lab, sim_experiment
from tests.support.controller_proc import ControllerProcess
from tests.support.prometheus_server import PrometheusServer
from tests.support.webhook_receiver import Receiver

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "deploy" / "prometheus" / "alerts" / "watches.yml"
HOOK_PATH = "/hooks/T0/B0/k3y-of-the-hook"
CHANGE = {"field": "engine", "before": "tunelab-simulator 0.5.2",
          "after": "tunelab-simulator 0.5.3"}  # fmt: skip


def watch_doc(controller: ControllerProcess, name: str) -> dict[str, Any]:
    result = controller.cli("watch", "show", name, "--json")
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def judged(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in doc["occurrences"] if o["verdict"] is not None]


def wait_judged(controller: ControllerProcess, name: str, count: int) -> dict[str, Any]:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        doc = watch_doc(controller, name)
        if len(judged(doc)) >= count:
            return doc
        time.sleep(0.5)
    raise AssertionError(f"{count} occurrences never judged:\n{controller.log()[-3000:]}")


def prometheus_on(controller: ControllerProcess, workdir: Path) -> PrometheusServer:
    """A real Prometheus scraping the controller every second, the watch alerts loaded."""
    workdir.mkdir()
    config = workdir / "prometheus.yml"
    config.write_text(
        f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["{ALERTS}"]
scrape_configs:
  - job_name: tunelab-controller
    static_configs:
      - targets: ["127.0.0.1:{controller.metrics_port}"]
"""
    )
    return PrometheusServer(config, workdir)


def wait_alert(prometheus: PrometheusServer, name: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    alerts: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        alerts = prometheus.get("/api/v1/alerts")["data"]["alerts"]
        firing = [a for a in alerts if a["labels"]["alertname"] == name]
        if firing and firing[0]["state"] == "firing":
            return firing[0]
        time.sleep(0.5)
    raise AssertionError(f"{name} never fired: {json.dumps(alerts)[:2000]}\n{prometheus.log()}")


def test_a_watch_calls_the_upgrade_a_regression_and_survives_a_kill(
    lab: Lab, tmp_path: Path
) -> None:
    hook = Receiver([503], HOOK_PATH)  # the first POST fails: retried
    controller = lab.start_controller(TUNELAB_CONTROLLER_WATCH_WEBHOOK_URL=hook.url)
    prometheus = prometheus_on(controller, tmp_path / "prometheus")
    try:
        run_the_watch(lab, controller, prometheus, hook, tmp_path)
    finally:
        prometheus.stop()
        hook.close()


def run_the_watch(
    lab: Lab,
    controller: ControllerProcess,
    prometheus: PrometheusServer,
    hook: Receiver,
    tmp_path: Path,
) -> None:
    lab.add_agent("sim-a")
    speed = tmp_path / "speed"
    speed.write_text("1.0\nversion 0.5.2\n")
    doc = sim_experiment("nightly")
    doc["server"]["flags"]["--speed-file"] = str(speed)
    doc["benchmark"] = {"concurrency": [4], "requests": 12, "input_len": 16, "output_len": 16}
    doc["watch"] = {"every": "3s", "launches": 3, "metrics": ["output_throughput"],
                    "margin": "5%"}  # fmt: skip
    path = tmp_path / "watch.yaml"
    path.write_text(yaml.safe_dump(doc))
    added = controller.cli("watch", "add", str(path), "--json")
    assert added.returncode == 0, added.stdout + added.stderr
    assert json.loads(added.stdout)["name"] == "nightly"

    before = wait_judged(controller, "nightly", 2)
    speed.write_text("1.6\nversion 0.5.3\n")  # the upgrade: 60 % slower from the next start
    ran_before = len(judged(before))  # all their launches ended before the change
    verdicts_before = [o["verdict"] for o in judged(before)]
    assert verdicts_before[0] == "baseline"
    assert "regression" not in verdicts_before, json.dumps(judged(before), indent=1)
    changed = [o["changes"] for o in judged(before) if o["changes"]]
    assert not changed, changed  # same version, same argv
    prometheus.wait_ready()
    prometheus.wait_targets_up({"tunelab-controller"})
    assert not [
        a for a in prometheus.get("/api/v1/alerts")["data"]["alerts"]
        if a["labels"]["alertname"] == "TunelabWatchRegression"
    ]  # fmt: skip

    # the next may have been running at the change; the two after it ran on the slow server
    after = wait_judged(controller, "nightly", ran_before + 3)
    calls = {o["index"]: o["verdict"] for o in judged(after)}
    assert "regression" in [calls[i] for i in range(ran_before + 1, ran_before + 4)], calls
    regression = next(o for o in judged(after) if o["verdict"] == "regression")
    row = regression["metrics"][0]
    assert row["metric"] == "output_throughput" and row["change_pct"] < -5
    # every occurrence wholly after the upgrade names the version that changed
    upgraded = [o for o in judged(after) if o["index"] >= ran_before + 2]
    assert upgraded and all(CHANGE in o["changes"] for o in upgraded), upgraded
    shown = controller.cli("watch", "show", "nightly")
    assert shown.returncode == 0 and "output_throughput" in shown.stdout, shown.stderr
    assert "(regression, " in shown.stdout
    joined = " ".join(shown.stdout.split())  # a verdict line wraps at 100 columns
    assert "changed since the baseline: tunelab-simulator 0.5.2 → 0.5.3" in joined, shown.stdout

    # the latest verdict is a regression (against the first occurrence): the alert fires
    alert = wait_alert(prometheus, "TunelabWatchRegression")
    assert alert["labels"]["watch"] == "nightly"
    assert alert["labels"]["metric"] == "output_throughput"
    assert "output_throughput regressed" in alert["annotations"]["summary"]
    assert "changed by -" in alert["annotations"]["description"]  # humanizePercentage

    # the webhook had every verdict, the first after a retry, the regression with its change
    hook.wait_requests(len(judged(after)) + 1)
    texts = [b["text"] for b in hook.bodies]
    assert texts[0] == texts[1] == "tunelab watch nightly #1: baseline"
    assert any(
        t.startswith("tunelab watch nightly #")
        and re.search(r": regression against #1(-#\d+)?\n", t)  # a pooled baseline: #1-#2
        and "changed since the baseline: tunelab-simulator 0.5.2 → 0.5.3" in t
        for t in texts
    ), texts  # fmt: skip
    assert HOOK_PATH not in controller.log() and hook.url not in shown.stdout

    # a controller killed between occurrences: after a pause longer than two periods, one
    # occurrence runs (not one per missed slot), and the numbers stay 1..n with no repeat
    paused_count = len(watch_doc(controller, "nightly")["occurrences"])
    controller.kill9()
    time.sleep(7.0)  # two slots missed
    controller.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        occurrences = watch_doc(controller, "nightly")["occurrences"]
        if len(occurrences) > paused_count:
            break
        time.sleep(0.2)
    paused = controller.cli("watch", "pause", "nightly")
    assert paused.returncode == 0, paused.stderr
    occurrences = watch_doc(controller, "nightly")["occurrences"]
    numbers = [o["index"] for o in occurrences]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    groups = [o["group"] for o in occurrences]
    assert len(set(groups)) == len(groups)
    dues = [o["due_at"] for o in occurrences]
    assert dues == sorted(set(dues)), dues
    restarted = [o for o in occurrences if o["index"] > paused_count]
    assert 1 <= len(restarted) <= 2, [(o["index"], o["started_at"]) for o in restarted]
    if len(restarted) == 2:  # the second only a full period after the first
        assert restarted[1]["started_at"] - restarted[0]["started_at"] >= 2.9
    listed = controller.cli("watch", "ls", "--json")
    assert json.loads(listed.stdout)[0]["state"] == "paused"
    assert controller.cli("watch", "rm", "nightly").returncode == 0
    assert controller.cli("watch", "show", "nightly").returncode == 4
