"""E2E: a watch on real processes — controller, agent and simulator servers on loopback. The
simulator reads an "upgrade" file at each start (--speed-file): no regression is called before
the file slows it down, a regression within two occurrences after; a controller killed with
SIGKILL between occurrences neither skips nor doubles one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Lab, sim_experiment
from tests.support.controller_proc import ControllerProcess


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


def test_a_watch_calls_the_upgrade_a_regression_and_survives_a_kill(
    lab: Lab, tmp_path: Path
) -> None:
    controller = lab.start_controller()
    lab.add_agent("sim-a")
    speed = tmp_path / "speed"
    speed.write_text("1.0\n")
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
    speed.write_text("1.6\n")  # the upgrade: every step 60 % slower from the next start on
    ran_before = len(judged(before))  # all their launches ended before the change
    verdicts_before = [o["verdict"] for o in judged(before)]
    assert verdicts_before[0] == "baseline"
    assert "regression" not in verdicts_before, json.dumps(judged(before), indent=1)

    # the next may have been running at the change; the two after it ran on the slow server
    after = wait_judged(controller, "nightly", ran_before + 3)
    calls = {o["index"]: o["verdict"] for o in judged(after)}
    assert "regression" in [calls[i] for i in range(ran_before + 1, ran_before + 4)], calls
    regression = next(o for o in judged(after) if o["verdict"] == "regression")
    row = regression["metrics"][0]
    assert row["metric"] == "output_throughput" and row["change_pct"] < -5
    shown = controller.cli("watch", "show", "nightly")
    assert shown.returncode == 0 and "output_throughput" in shown.stdout, shown.stderr
    assert "(regression)" in shown.stdout

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
