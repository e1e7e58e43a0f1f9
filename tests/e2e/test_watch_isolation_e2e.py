"""E2E, issue 45.1: no watch can stop the queue. Real processes on loopback — the controller,
an agent, simulator and stand-in servers — with the issue's triggers:

- a server whose usage says ``completion_tokens = 10**200`` (once an OverflowError in the
  statistics, in every tick, twice a second, across restarts);
- a checkpoint whose safetensors header declares a 10**400-byte tensor (once an OverflowError
  in the watch's provenance diff, and in ``show``, ``report`` and ``compare`` of the run);
- ``watch.margin: 1.0e-300`` (accepted, then an OverflowError in the judge);
- and a watch whose step fails whatever the cause (its stored spec no controller can read):
  the guard marks it, ``watch show`` says so in one line, and the rest goes on.

An ordinary experiment submitted meanwhile is scheduled and succeeds; no tick fails."""

from __future__ import annotations

import json
import sqlite3
import struct
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import Lab, sim_experiment
from tests.e2e.test_slurm import wait_for
from tests.support.controller_proc import ControllerProcess

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def checkpoint(folder: Path) -> Path:
    """A model folder whose one shard's header declares a tensor of 10**400 bytes."""
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8})
    )
    header = json.dumps({"w": {"dtype": "F16", "shape": [1], "data_offsets": [0, 10**400]}})
    raw = header.encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return folder


def watch_spec(name: str, server: dict[str, Any], **watch: Any) -> dict[str, Any]:
    doc = sim_experiment(name)
    doc["server"].update(server)
    doc["benchmark"] = {"concurrency": [2], "requests": 4, "input_len": 8, "output_len": 4}
    doc["watch"] = {"every": "2s", "launches": 2, "metrics": ["output_throughput"], **watch}
    return doc


def add_watch(controller: ControllerProcess, doc: dict[str, Any], path: Path) -> Any:
    path.write_text(yaml.safe_dump(doc))
    return controller.cli("watch", "add", str(path), "--json")


def watch_doc(controller: ControllerProcess, name: str) -> dict[str, Any]:
    shown = controller.cli("watch", "show", name, "--json")
    assert shown.returncode == 0, shown.stderr
    found: dict[str, Any] = json.loads(shown.stdout)
    return found


def plant_unreadable_watch(db: Path, now: float) -> None:
    """A watch as another version might have stored it: its spec's launches is not a number."""
    spec = {"every": "2s", "period": 2.0, "cron": "", "launches": "three", "baseline": "first",
            "pin": 0, "metrics": ["output_throughput"], "margin": 0.02}  # fmt: skip
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO watches (name, spec_json, base_yaml, state, pin, next_due, created_at) "
            "VALUES (?, ?, ?, 'active', 0, ?, ?)",
            ("unreadable", json.dumps(spec), "name: x\n", now, now),
        )


def judged(controller: ControllerProcess, name: str) -> list[dict[str, Any]]:
    return [o for o in watch_doc(controller, name)["occurrences"] if o["verdict"] is not None]


def judged_twice(controller: ControllerProcess, name: str) -> bool:
    return len(judged(controller, name)) >= 2


def test_no_watch_stops_the_queue(lab: Lab, tmp_path: Path) -> None:
    controller = lab.start_controller()
    lab.add_agent("sim-a")

    refused = add_watch(
        controller, watch_spec("tiny-margin", {}, margin=1.0e-300), tmp_path / "m.yaml"
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "watch.margin" in refused.stderr and "at least 0.1%" in refused.stderr

    hostile = {"command": [sys.executable, str(FAKES / "usage_server.py")],
               "flags": {"--port": "{port}", "--model": "hostile"},
               "ready": {"model": "hostile", "path": "/health", "timeout": "1m"}}  # fmt: skip
    added = add_watch(controller, watch_spec("usage", hostile), tmp_path / "u.yaml")
    assert added.returncode == 0, added.stderr
    model = str(checkpoint(tmp_path / "model"))
    broken = {"flags": {**sim_experiment("x")["server"]["flags"], "--model": model},
              "ready": {"model": model, "timeout": "1m"}}  # fmt: skip
    added = add_watch(controller, watch_spec("checkpoint", broken), tmp_path / "c.yaml")
    assert added.returncode == 0, added.stderr
    plant_unreadable_watch(controller.db, time.time())

    (done,) = lab.submit(sim_experiment("ordinary"), wait=True)
    assert done["state"] == "SUCCEEDED", done  # scheduled and run while a watch fails

    for name in ("usage", "checkpoint"):  # judged twice each: the baseline, then against it
        wait_for(f"{name} judged twice", partial(judged_twice, controller, name), timeout=240)
        assert watch_doc(controller, name)["step_error"] is None

    unreadable = watch_doc(controller, "unreadable")
    fault = unreadable["step_error"]
    assert fault is not None and fault["failures"] >= 1, unreadable
    assert fault["error"].startswith("ValueError: invalid literal for int()"), fault
    shown = controller.cli("watch", "show", "unreadable")
    assert shown.returncode == 0 and "step failing (" in shown.stdout, shown.stdout
    listed = controller.cli("watch", "ls")
    assert "STEP FAILING" in listed.stdout, listed.stdout

    log = controller.log()
    assert "control_tick_failed" not in log, log[-3000:]
    failed = [line for line in log.splitlines() if "control_step_failed" in line]
    assert 1 <= len(failed) <= 12, failed  # backed off: 2 s, 4 s, 8 s ... not twice a second
    assert all(len(line) < 1000 for line in failed) and "Traceback" not in log

    # the run on the broken checkpoint: the header refused with the tensor named, and show,
    # report and compare of it work (they raised OverflowError before)
    group = judged(controller, "checkpoint")[-1]["group"]
    with sqlite3.connect(controller.db) as conn:
        (experiment,) = conn.execute("SELECT id FROM experiments WHERE grp = ? LIMIT 1", (group,))
    shown = controller.cli("show", experiment[0])
    assert shown.returncode in (0, 1) and "Traceback" not in shown.stderr, shown.stderr
    prov = json.dumps(controller.cli_json("show", experiment[0]))
    assert "data_offsets" in prov and "is not 0 <= start <= end" in prov, prov[:3000]
    for argv in (["compare", group], ["report", group, "--out", str(tmp_path / "r.html")]):
        result = controller.cli(*argv)
        assert result.returncode in (0, 1), result.stderr
        assert "Traceback" not in result.stderr and "OverflowError" not in result.stderr
