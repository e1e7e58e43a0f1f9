"""E2E: a search's answer on real processes (controller, agents, simulator servers on loopback).
An A/A search over a flag the simulator ignores ends in a tie or undecided, never "better"; a
2x effect is a winner better than its runner-up. (Successive halving's promotion with OOM'd
trials is tested on the driver in tests/unit/controller/test_search_driver.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Lab


def spec(space: dict[str, list[Any]]) -> dict[str, Any]:
    return {
        "name": "race",
        "host": {"labels": {"pool": "demo"}},
        "server": {
            "command": ["{python}", "-P", "-m", "tunelab.bench.simulator"],
            "flags": {
                "--port": "{port}",
                "--model": "sim-7b",
                "--startup-seconds": 0.1,
                "--step-ms-base": 10,
                "--step-ms-per-seq": 0.1,
                "--max-num-seqs": 16,
                "--tag": "a",
            },
            "port": "auto",
            "ready": {"path": "/health", "model": "sim-7b", "timeout": "1m"},
            "stop_grace": "5s",
        },
        "benchmark": {"input_len": 16, "output_len": 16, "requests": 64},
        "max_duration": "3m",
        "search": {
            "space": space,
            "objective": {"maximize": "output_throughput"},
            "slo": {"tpot_p99_ms": 200},
            "load": {"concurrency": [16]},
            "budget": {"trials": 4},
            "parallel": 2,
        },
    }


def run(lab: Lab, tmp_path: Path, doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Submit with --wait as a user would; the printed text and the search document."""
    controller = lab.start_controller()
    lab.add_agent("sim-a", labels="pool=demo")
    lab.add_agent("sim-b", labels="pool=demo")
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = controller.cli("submit", str(path), "--wait", timeout=500)
    assert result.returncode == 0, result.stdout + result.stderr + controller.log()[-3000:]
    group = re.search(r"search (g-[0-9a-f]+)", result.stdout)
    assert group, result.stdout
    return result.stdout, controller.cli_json("search", "show", group.group(1))


def test_an_a_a_search_ends_in_a_tie_or_undecided_never_better(lab: Lab, tmp_path: Path) -> None:
    out, doc = run(lab, tmp_path, spec({"server.flags.--tag": ["a", "b"]}))
    best = doc["best"]
    assert best["verdict"] in ("tie", "undecided"), doc["answer"]
    assert best["vs_runner_up"]["verdict"] in ("tie", "undecided")
    assert re.search(r"^answer: (tie|undecided): ", out, re.MULTILINE), out
    n, m = best["vs_runner_up"]["launches"]
    assert n >= 2 and m >= 2, "judged over launches, two each at least"
    lo, hi = best["vs_runner_up"]["interval"]
    assert lo <= 0.0 <= hi, "an A/A interval holds no difference"
    if best["verdict"] == "undecided":
        assert "search.budget.confirm" in doc["answer"], doc["answer"]
    else:
        assert best["tied_with"] == [best["vs_runner_up"]["trial"]]


def test_a_2x_effect_is_a_winner_better_than_its_runner_up(lab: Lab, tmp_path: Path) -> None:
    """--step-ms-base 20 makes every step twice as long as 10: half the tokens/s."""
    out, doc = run(lab, tmp_path, spec({"server.flags.--step-ms-base": [20, 10]}))
    best = doc["best"]
    assert best["params"] == {"server.flags.--step-ms-base": 10}
    assert best["verdict"] == "better" and best["tied_with"] == []
    versus = best["vs_runner_up"]
    assert versus["verdict"] == "better" and versus["params"] == {"server.flags.--step-ms-base": 20}
    assert 50.0 < versus["change_pct"] < 150.0 and versus["interval"][0] > 0.0
    assert re.search(r"^answer: winner: trial \d+ \(--step-ms-base=10\) is better than", out, re.M)
    assert best["interval"][0] > 0.0 and best["launches"] == versus["launches"][0]
    effect = doc["recommendation"]["effect"]  # the default is the runner-up here
    assert effect["verdict"] == "better" and effect["interval"][0] > 0.5
    assert effect["load"] == {"concurrency": 16} == effect["default_load"]
