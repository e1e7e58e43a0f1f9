"""E2E: timelines through the controller: stored with the result, listed by show, the data by
show --timeline --json, kept across a controller restart (kill -9), differences in compare,
panels in the report."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.conftest import Lab, sim_experiment


def experiment(name: str, *phase: str) -> dict[str, Any]:
    doc = sim_experiment(
        name,
        benchmark={
            "concurrency": [2],
            "duration": "5s",
            "warmup": 2,
            "input_len": 8,
            "output_len": 16,
            "timeline": {"step": "250ms"},
        },
    )
    doc = copy.deepcopy(doc)
    if phase:
        doc["server"]["flags"]["--phase"] = phase[0]
    return doc


def test_timelines_are_kept_listed_compared_and_survive_a_restart(lab: Lab) -> None:
    controller = lab.start_controller()
    lab.add_agent("gpu-a")
    full, calm = lab.submit(
        experiment("preempting", "cache-full@1-3"), experiment("calm"), wait=True
    )
    shown = controller.cli_json("show", full["id"], "--timeline")
    [attempt] = shown["attempts"]
    assert attempt["state"] == "SUCCEEDED"
    timeline = attempt["timeline"]
    assert timeline["step_seconds"] == 0.25 and timeline["windows"] >= 20
    kinds = [e["kind"] for e in attempt["timeline_events"]]
    assert "kv_cache_full" in kinds
    assert "timeline" not in attempt["result"] and attempt["result"]["timeline_bytes"] > 0
    assert "timeline" not in controller.cli_json("show", full["id"])["attempts"][0]

    text = controller.cli("show", full["id"]).stdout
    assert "timeline events:" in text and "kv_cache_full: the engine preempted" in text

    controller.kill9()
    controller.start()
    again = controller.cli_json("show", full["id"], "--timeline")["attempts"][0]
    assert again["timeline"] == timeline
    assert again["timeline_events"] == attempt["timeline_events"]

    compared = controller.cli_json("compare", full["id"], calm["id"])
    assert any(
        line.startswith("preempting preempted") and line.endswith("calm never")
        for line in compared["timeline_differences"]
    ), compared["timeline_differences"]

    out = lab.root / "report.html"
    made = controller.cli("report", full["id"], calm["id"], "--out", str(out), "--no-profiles")
    assert made.returncode == 0, made.stderr
    page = out.read_text()
    assert "<h2>Timelines</h2>" in page and page.count('class="datum event"') >= 1
    assert 'data-chart="timeline overlay"' in page
