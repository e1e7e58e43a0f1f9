"""E2E, real processes (controller, agents, simulator servers on loopback), issue 35 item 4:
a search over a pool of an H200 host (the captured NVML snapshot) and a host without a GPU is
refused at submission with both classes named, and narrowed to one host it runs and shows the
host of every trial; a search whose simulator gets slower mid-search (its --speed-file raised
after the default's start launches) ends with a drift warning on its answer."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Lab
from tests.support.controller_proc import ControllerProcess


def spec(host: dict[str, Any], flags: dict[str, Any], trials: int = 2) -> dict[str, Any]:
    return {
        "name": "hosts",
        "host": host,
        "server": {
            "command": ["{python}", "-P", "-m", "tunelab.bench.simulator"],
            "flags": {"--port": "{port}", "--model": "sim-7b", "--startup-seconds": 0.1,
                      "--step-ms-base": 10, "--step-ms-per-seq": 0.1, "--tag": "a", **flags},
            "port": "auto",
            "ready": {"path": "/health", "model": "sim-7b", "timeout": "1m"},
            "stop_grace": "5s",
        },
        "benchmark": {"input_len": 16, "output_len": 16, "requests": 48},
        "max_duration": "3m",
        "search": {
            "space": {"server.flags.--tag": ["a", "b"]},
            "objective": {"maximize": "output_throughput"},
            "slo": {"tpot_p99_ms": 500},
            "load": {"concurrency": [8]},
            "budget": {"trials": trials, "confirm": 2},
            "parallel": 1,
        },
    }  # fmt: skip


def write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / f"search-{len(list(tmp_path.glob('search-*')))}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def polled(controller: ControllerProcess, names: set[str]) -> list[dict[str, Any]]:
    """``hosts ls --json`` once every host named has answered a poll."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        hosts = controller.cli_json("hosts", "ls")
        if {h["name"] for h in hosts if h["agent_instance_id"]} >= names:
            return list(hosts)
        time.sleep(0.3)
    raise AssertionError(f"hosts never polled: {controller.cli_json('hosts', 'ls')}")


def test_a_mixed_pool_is_refused_and_a_search_on_one_class_shows_its_hosts(
    lab: Lab, tmp_path: Path
) -> None:
    controller = lab.start_controller()
    lab.add_agent("h200", labels="pool=mixed")
    lab.add_agent("cpu", labels="pool=mixed", nvml=None)
    hosts = {h["name"]: h for h in polled(controller, {"h200", "cpu"})}
    assert hosts["h200"]["gpu_names"] == ["NVIDIA H200"] and hosts["cpu"]["gpus"] == 0
    refused = controller.cli("submit", write(tmp_path, spec({"labels": {"pool": "mixed"}}, {})))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "matches hosts of 2 classes" in said, said
    assert re.search(r"1x NVIDIA H200: h200", said) and "no GPU: cpu" in said, said
    listed = controller.cli("ls", "--json")  # nothing was stored
    assert listed.returncode == 0 and '"hosts/t' not in listed.stdout, listed.stdout

    done = controller.cli("submit", write(tmp_path, spec({"name": "h200"}, {})), "--wait",
                          timeout=400)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr + controller.log()[-3000:]
    group = re.search(r"search (g-[0-9a-f]+)", done.stdout)
    assert group, done.stdout
    shown = controller.cli("search", "show", group.group(1))
    header = next(line for line in shown.stdout.splitlines() if line.startswith("#  trial"))
    # one host: no host column, the hosts: line names it and its class
    assert not re.search(r"\bhost\b", header), shown.stdout
    assert "hosts: h200: 1x NVIDIA H200, driver " in shown.stdout, shown.stdout
    doc = controller.cli_json("search", "show", group.group(1))
    launched = [t for t in doc["trials"] if t["experiment"]]
    assert launched and all(t["host"] == "h200" for t in launched)
    assert all(t["host_class"].startswith("1x NVIDIA H200, driver ") for t in launched)
    assert not any(w.startswith("hosts:") for w in doc["warnings"])


def test_a_simulator_slowed_mid_search_is_a_drift_warning(lab: Lab, tmp_path: Path) -> None:
    """The speed file is absent (speed 1) until the default's two start launches have ended,
    then says 3 (every step three times as long): the end launches measure far below the start
    (a step of 1.6 once read -38 % [-62, +0.5] over 2 + 2 launches on a busy machine)."""
    speed = tmp_path / "speed"
    controller = lab.start_controller()
    lab.add_agent("sim", labels="pool=drift")
    flags = {"--speed-file": str(speed), "--launch-cv": 0.02}
    submitted = controller.cli("submit", write(tmp_path, spec({"labels": {"pool": "drift"}},
                               flags, trials=2)), "--json")  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    group = re.search(r"g-[0-9a-f]+", submitted.stdout)
    assert group, submitted.stdout
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        doc = controller.cli_json("search", "show", group.group(0))
        starts = [t for t in doc["trials"] if t["drift"] == "start"]
        if len(starts) == 2 and all(t["state"] != "RUNNING" for t in starts):
            break
        assert doc["state"] == "RUNNING", doc["message"]
        time.sleep(0.5)
    assert all(t["state"] == "DONE" for t in starts), starts
    speed.write_text("3\n")
    waited = controller.cli("wait", group.group(0), timeout=400)
    assert waited.returncode == 0, waited.stdout + waited.stderr + controller.log()[-3000:]
    doc = controller.cli_json("search", "show", group.group(0))
    assert [t["drift"] for t in doc["trials"] if t["drift"]] == ["start"] * 2 + ["end"] * 2
    found = doc["drift"]
    assert found["verdict"] == "drift", found
    assert found["change_pct"] < -25.0 and found["interval"][1] < -2.0, found
    assert any(w.startswith("drift: the default measured") for w in doc["warnings"]), doc
    shown = controller.cli("search", "show", group.group(0))
    assert "warning: drift: the default measured" in shown.stdout, shown.stdout
