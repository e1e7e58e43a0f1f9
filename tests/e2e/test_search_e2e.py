"""E2E: a search on real processes — the controller, agents and simulator servers on loopback.
examples/search-sim.yaml through `submit --wait` prints the best configuration with its evidence
and the one-line answer; two agents share the trials; a controller killed with SIGKILL mid-race
resumes it without running a finished trial again and reaches the same answer. The race's
answers (test_search_race_e2e.py) are checked on real processes too."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Lab
from tests.support.daemon_proc import REPO
from tunelab.v1 import controller_pb2

EXAMPLE = REPO / "examples" / "search-sim.yaml"
SEQS = "server.flags.--max-num-seqs"


def search_doc(lab: Lab, group: str) -> dict[str, Any]:
    assert lab.controller is not None
    response = lab.controller.stub().GetSearch(
        controller_pb2.GetSearchRequest(group=group), timeout=10
    )
    found: dict[str, Any] = json.loads(response.search_json)
    return found


def run_small_search(
    lab: Lab,
    tmp_path: Path,
    load: dict[str, Any],
    trials: int,
    startup: float | None = None,
    requests: int | None = None,
) -> dict[str, Any]:
    """The example over --max-num-seqs 8 and 16 only, one agent, a TPOT SLO, confirm 2: its
    ``submit --wait --json`` document."""
    controller = lab.start_controller()
    lab.add_agent("sim-a", labels="pool=demo")
    doc = yaml.safe_load(EXAMPLE.read_text())
    if startup is not None:
        doc["server"]["flags"]["--startup-seconds"] = startup
    if requests is not None:
        doc["benchmark"]["requests"] = requests
    doc["search"].update(
        space={SEQS: [8, 16]},
        slo={"tpot_p99_ms": 25},
        load=load,
        budget={"trials": trials, "confirm": 2},
        parallel=1,
    )
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = controller.cli("submit", str(path), "--wait", "--json", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr + controller.log()[-3000:]
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_the_example_search_prints_the_best_configuration_and_two_agents_share_it(
    lab: Lab,
) -> None:
    controller = lab.start_controller()
    lab.add_agent("sim-a", labels="pool=demo")
    lab.add_agent("sim-b", labels="pool=demo")
    result = controller.cli("submit", str(EXAMPLE), "--wait", timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr + controller.log()[-3000:]
    out = result.stdout
    group = re.search(r"search (g-[0-9a-f]+)", out)
    assert group, out
    assert "best configuration (trial " in out and "--max-num-seqs=64" in out, out
    answer = re.search(r"^answer: (winner|tie|undecided): ", out, re.MULTILINE)
    assert answer, out
    assert "vs the default --max-num-batched-tokens=512, --max-num-seqs=8 at concurrency " in out
    assert "server argv:" in out and "--max-num-seqs 64" in out
    doc = search_doc(lab, group.group(1))
    assert doc["state"] == "DONE"
    assert doc["best"]["params"][SEQS] == 64
    assert doc["answer"].startswith(answer.group(1))
    versus = doc["best"]["vs_runner_up"]
    assert versus["params"][SEQS] == 64  # 512/64 against 4096/64: the prefill budget only
    if versus["verdict"] == "better":  # a chunked prefill costs steps: a small real difference
        # ...or the runner-up was shown to miss the TTFT SLO at the best's load (its edge too)
        shown = versus["slo_misses"][1] >= 2 and versus["slo_misses"][0] == 0
        assert versus["interval"][0] > 0 or shown, versus
        assert min(versus["launches"]) >= 2, versus
    assert doc["best"]["launches"] >= 2 and doc["best"]["interval"][0] > 0
    assert 32 <= doc["best"]["load"]["concurrency"] <= 128  # past the cap, TTFT bounds it
    trials = {(t["params"][SEQS], t["params"]["server.flags.--max-num-batched-tokens"]): t
              for t in doc["trials"] if not t["race"] and not t["drift"]}  # fmt: skip
    assert trials[(128, 512)]["failure_reason"] == "CUDA_OOM"
    assert trials[(128, 4096)]["state"] == "SKIPPED"  # implied by the OOM at 128, 512
    effect = doc["recommendation"]["effect"]
    assert effect["relative_change"] > 1.5 and effect["load"] == doc["best"]["load"]  # ~5x
    assert effect["launches"][1] >= 2, "the default launched at the best's load"
    hosts = {
        e["attempts"][0]["host"]
        for e in controller.cli_json("ls", "--group", group.group(1))
        if e["attempts"]
    }
    assert hosts == {"sim-a", "sim-b"}, "both agents ran trials"
    shown = controller.cli_json("search", "show", group.group(1))
    assert set(shown) >= {"state", "best", "trials"} and shown["best"] == doc["best"]


def test_a_controller_killed_mid_race_resumes_it_and_reaches_the_same_answer(
    lab: Lab, tmp_path: Path
) -> None:
    controller = lab.start_controller()
    agent = lab.add_agent("sim-a", labels="pool=demo")
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["search"]["space"] = {SEQS: [8, 16, 32, 64]}
    spec["search"]["parallel"] = 1
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(spec))
    submitted = controller.cli("submit", str(path), "--json")
    assert submitted.returncode == 0, submitted.stderr
    group = json.loads(submitted.stdout)["search_group"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # the strategy is done and a launch of the race ended
        before = search_doc(lab, group)
        if any(t["race"] and t["state"] == "DONE" for t in before["trials"]):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no launch of the race ended: {before}")
    finished_before = {t["number"]: t for t in before["trials"] if t["state"] == "DONE"}
    controller.kill9()  # SIGKILL: no shutdown path runs
    controller.start()
    result = controller.cli("wait", group, "--json", timeout=300)
    # every message carries the evidence: a failure here must explain itself the first time
    evidence = f"\ncontroller log:\n{controller.log()[-4000:]}"
    assert result.returncode == 0, result.stdout + result.stderr + evidence
    after = json.loads(result.stdout)
    assert after["state"] == "DONE" and after["best"]["params"] == {SEQS: 64}, (
        json.dumps(after["trials"], indent=1) + evidence
    )
    # 64 sequences give ~1.6x the tokens/s of 32 at 64's load: a winner, over launches
    assert after["best"]["verdict"] == "better", after["answer"]
    assert after["best"]["vs_runner_up"]["params"] == {SEQS: 32}
    assert after["answer"].startswith("winner: trial ")
    for number, trial in finished_before.items():  # finished trials are kept as they were
        assert after["trials"][number - 1] == trial, (trial, after["trials"][number - 1])
    experiments = [t["experiment"] for t in after["trials"] if t["experiment"]]
    assert len(experiments) == len(set(experiments)), after["trials"]
    assert sum(1 for t in after["trials"] if not t["race"] and not t["drift"]) == 4
    rounds: dict[int, list[str]] = {}
    for t in after["trials"]:
        if t["race"] and t["phase"] == "race":  # an effect round launches each side 3 times
            rounds.setdefault(t["race"], []).append(json.dumps(t["params"]))
    assert all(len(keys) == len(set(keys)) for keys in rounds.values()), (
        "no launch of a round queued twice across the restart",
        rounds,
    )
    starts = [line for line in agent.log().splitlines() if '"event": "server_started"' in line]
    assert len(starts) == len(experiments), (
        "each trial's server started once:\n" + "\n".join(starts) + evidence
    )


def test_search_cancel_stops_the_trials_and_wait_says_so(lab: Lab, tmp_path: Path) -> None:
    controller = lab.start_controller()
    lab.add_agent("sim-a", labels="pool=demo")
    path = tmp_path / "search.yaml"
    path.write_text(EXAMPLE.read_text())
    group = json.loads(controller.cli("submit", str(path), "--json").stdout)["search_group"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # one trial placed on the agent, the next queued
        running = [e for e in controller.cli_json("ls", "--group", group) if e["attempts"]]
        if running:
            break
        time.sleep(0.2)
    cancelled = controller.cli("search", "cancel", group)
    assert cancelled.returncode == 0, cancelled.stderr
    watched = controller.cli("search", "show", group, "--watch", timeout=120)
    assert watched.returncode == 0 and f"search {group} (sim-search): CANCELLED" in watched.stdout
    result = controller.cli("wait", group, "--json", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr  # not DONE
    doc = json.loads(result.stdout)
    assert doc["state"] == "CANCELLED" and doc["message"].startswith("cancelled")
    assert {t["state"] for t in doc["trials"]} <= {"CANCELLED", "DONE", "FAILED"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the running trial's experiment is stopped two-phase
        states = {e["state"] for e in controller.cli_json("ls", "--group", group)}
        if states <= {"CANCELLED", "SUCCEEDED", "FAILED"}:
            break
        time.sleep(0.3)
    assert states <= {"CANCELLED", "SUCCEEDED", "FAILED"}, states
    assert controller.cli("search", "show", "g-0000000000000000").returncode == 4


def test_a_load_search_with_a_plateau_stops_at_each_batch_cap(lab: Lab, tmp_path: Path) -> None:
    """With only a TPOT SLO a batch cap meets it at any concurrency (requests past the cap
    queue, TTFT pays): without a plateau the load search walks to the maximum, measuring
    queueing. ``plateau: 20%`` stops the ladder where doubling the load stopped paying, so each
    trial's load is its cap, found in a few points, and its throughput is the cap's."""
    found = run_small_search(
        lab, tmp_path, load={"concurrency": "find", "max": 256, "plateau": "20%"}, trials=6
    )
    measured = [t for t in found["trials"] if t["state"] == "DONE" and not t["drift"]]
    loads = {t["params"][SEQS]: t["load"]["concurrency"] for t in measured if not t["race"]}
    assert loads == {8: 8, 16: 16}, found["trials"]
    assert found["best"]["params"][SEQS] == 16 and found["best"]["load"]["concurrency"] == 16
    assert found["best"]["vs_runner_up"]["verdict"] == "better", found["best"]


def test_the_answer_says_what_it_cost(lab: Lab, tmp_path: Path) -> None:
    """Each launch's load (STARTING to READY) and measuring are stored with it and summed in
    ``cost``: a simulator that takes 1.5 s to load makes every launch's load at least that."""
    # a fixed load: requests per point
    found = run_small_search(
        lab, tmp_path, load={"concurrency": [8]}, trials=2, startup=1.5, requests=40
    )
    cost = found["cost"]
    launched = [t for t in found["trials"] if t["experiment"] and t["state"] != "SKIPPED"]
    assert cost["launches"] == len(launched) >= 4  # the strategy's two and the race's
    assert cost["load_seconds"] >= 1.5 * cost["launches"]  # wall seconds: no GPU here
    assert cost["measure_seconds"] > 0
    assert cost["gpu_seconds"] >= cost["load_seconds"] + cost["measure_seconds"] - 1.0
    noise = found["noise"]  # no blocks measured yet: the launches' whole spread
    assert noise["blocks"] == 0 and noise["within_cv"] is None and noise["launches"] >= 4
