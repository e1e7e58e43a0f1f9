"""E2E: results into a real MLflow tracking server (``mlflow server``, SQLite backend, a local
artifact folder, on loopback) — by hand with ``tunelab export mlflow`` and automatically from
the controller (``--mlflow-tracking-uri``), read back through MLflow's REST API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Lab
from tests.support.mlflow_server import MlflowServer
from tests.support.ports import free_port
from tunelab.analysis.mlflow.plan import plans_for
from tunelab.analysis.mlflow.sink import MlflowSink

REPO = Path(__file__).resolve().parents[2]


def ablation(name: str, repeat: int, requests: int = 4) -> dict[str, Any]:
    """A baseline and one change of the simulator's decode step, ``repeat`` launches each."""
    return {
        "name": name,
        "host": {"labels": {"pool": "e2e"}},
        "server": {
            "command": [sys.executable, "-P", "-m", "tunelab.bench.simulator"],
            "flags": {
                "--port": "{port}", "--startup-seconds": 0.2, "--model": "sim",
                "--ttft-ms": 20, "--itl-ms": 10,
            },
            "env": {"HF_TOKEN": "s3cret-key-value"},
            "port": "auto",
            "ready": {"model": "sim", "timeout": "1m"},
            "stop_grace": "5s",
        },
        "benchmark": {
            "concurrency": [1, 2], "requests": requests, "input_len": 16, "output_len": 8,
        },
        "max_duration": "3m",
        "repeat": repeat,
        "ablation": [{"server.flags.--itl-ms": 5}],
    }  # fmt: skip


def submit(lab: Lab, spec: dict[str, Any]) -> str:
    assert lab.controller is not None
    path = lab.root / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = lab.controller.cli("submit", str(path), "--wait", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    experiments = json.loads(done.stdout)
    return str(experiments[0]["group"])


def export(lab: Lab, group: str, uri: str, experiment: str, *more: str) -> dict[str, Any]:
    """``tunelab export mlflow`` of a group (or of experiment ids: ``group`` and ``more``)."""
    assert lab.controller is not None
    done = lab.controller.cli(
        "export", "mlflow", group, *more, "--tracking-uri", uri, "--experiment", experiment,
        "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("{"), done.stdout[:2000] + done.stderr[-2000:]
    return dict(json.loads(done.stdout))


def test_a_group_exported_by_hand_then_again_without_duplicates(
    lab: Lab, mlflow: MlflowServer
) -> None:
    lab.start_controller()
    lab.add_agent("a")
    group = submit(lab, ablation("mlf-hand", repeat=2))
    first = export(lab, group, mlflow.uri, "hand")
    runs = mlflow.runs("hand")
    # a parent per group and one run per attempt (2 variants x 2 launches)
    assert len(runs) == 5 and len(first["runs"]) == 5
    parents = [r for r in runs if r["tags"]["tunelab.key"] == f"group:{group}"]
    children = [r for r in runs if r["tags"]["tunelab.key"].startswith("attempt:")]
    assert len(parents) == 1 and len(children) == 4
    parent_id = parents[0]["info"]["run_id"]
    assert all(c["tags"]["mlflow.parentRunId"] == parent_id for c in children)
    variant = [c for c in children if c["params"].get("varied.server.flags.--itl-ms") == "5"]
    assert len(variant) == 2
    run = variant[0]
    # params: the varied value and the server argv's flags; no secret of the spec's env
    assert run["params"]["flag.--itl-ms"] == "5" and run["params"]["flag.--model"] == "sim"
    assert "s3cret-key-value" not in json.dumps(runs)
    # metrics per load point as steps: two concurrencies -> steps 0 and 1
    history = mlflow.metric_history(run["info"]["run_id"], "output_throughput")
    assert sorted(h["step"] for h in history) == [0, 1] and all(h["value"] > 0 for h in history)
    assert {"ttft_p99_ms", "tpot_p50_ms", "itl_p99_ms", "concurrency"} <= set(run["metrics"])
    # tags: host, engine, ids, state; the parent holds each change's effect
    assert run["tags"]["host"] == "a" and run["tags"]["tunelab.state"] == "SUCCEEDED"
    assert run["tags"]["tunelab.experiment"].startswith("mlf-hand/--itl-ms=5#")
    assert run["info"]["status"] == "FINISHED"
    effect_keys = [k for k in parents[0]["metrics"] if k.startswith("effect/--itl-ms_5/")]
    assert any(k.endswith("/ratio") for k in effect_keys), parents[0]["metrics"]
    assert any(k.endswith("/ci95_low") for k in effect_keys)
    assert any(k.startswith("verdict/--itl-ms_5/") for k in parents[0]["tags"])
    assert mlflow.artifacts(run["info"]["run_id"]) == ["result.json"]
    assert sorted(mlflow.artifacts(parent_id)) == ["comparison.json", "report.html"]

    second = export(lab, group, mlflow.uri, "hand")
    assert [r["written"] for r in second["runs"]] == [False] * 5
    assert {r["run_id"] for r in second["runs"]} == {r["run_id"] for r in first["runs"]}
    again = mlflow.runs("hand")
    assert len(again) == 5
    history = mlflow.metric_history(run["info"]["run_id"], "output_throughput")
    assert len(history) == 2  # not logged a second time


def test_a_group_exported_again_after_another_repeat_shows_the_new_effects(
    lab: Lab, mlflow: MlflowServer
) -> None:
    """The parent's effects change as repeats finish; MLflow's latest value is the new one
    (the re-export's metrics carry the export's time, not the old entry's step and time)."""
    lab.start_controller()
    lab.add_agent("a")
    group = submit(lab, ablation("mlf-more", repeat=3, requests=2))
    assert lab.controller is not None
    listed = lab.controller.cli_json("ls", "--group", group)
    early = [str(e["id"]) for e in listed if not str(e["name"]).endswith("#3")]
    assert len(early) == 4 and len(listed) == 6
    # the group as it stood before its third launches finished, then as a whole
    before = lab.controller.cli_json("compare", *early)
    export(lab, early[0], mlflow.uri, "more", *early[1:])
    parent = one_run(mlflow, "more", f"group:{group}")
    after = lab.controller.cli_json("compare", group)
    changed = effect_metrics(after)
    assert changed and changed != effect_metrics(before)
    export(lab, group, mlflow.uri, "more")

    runs = mlflow.runs("more")
    keys = [r["tags"]["tunelab.key"] for r in runs]
    assert len(keys) == 7 and len(set(keys)) == 7  # the parent and six attempts, once each
    latest = one_run(mlflow, "more", f"group:{group}")
    assert latest["info"]["run_id"] == parent["info"]["run_id"]
    for key, value in changed.items():  # MLflow's latest value is the new one, every one
        assert latest["metrics"][key] == pytest.approx(value, rel=1e-12), key
    for key, value in effect_metrics(before).items():
        if changed.get(key) != value:
            history = mlflow.metric_history(parent["info"]["run_id"], key)
            old, new = sorted(history, key=lambda h: int(h["timestamp"]))
            assert old["value"] == pytest.approx(value, rel=1e-12)
            assert new["value"] == pytest.approx(changed[key], rel=1e-12)
            assert int(new["timestamp"]) > int(old["timestamp"]) and new["step"] == old["step"]
    # an attempt exported both times: its load points are not logged a second time
    child = next(r for r in runs if r["tags"]["tunelab.key"] == f"attempt:{early[0]}-a1")
    assert len(mlflow.metric_history(child["info"]["run_id"], "output_throughput")) == 2


def one_run(server: MlflowServer, experiment: str, key: str) -> dict[str, Any]:
    found = [r for r in server.runs(experiment) if r["tags"]["tunelab.key"] == key]
    assert len(found) == 1, found
    return found[0]


def effect_metrics(document: dict[str, Any]) -> dict[str, float]:
    """The parent run's metrics a comparison document gives: each effect's ratio and bounds."""
    plan = plans_for(document, {})[0]
    assert plan.key.startswith("group:")
    return {key: value for key, value, _ in plan.metrics}


def test_two_writers_on_one_experiment_make_each_run_once(mlflow: MlflowServer) -> None:
    """Two controllers' exporters (or a by-hand export beside the controller's) with their
    caches read before the other wrote: neither creates a run the other made."""
    row = {"id": "x-1", "name": "two/--itl-ms=5#1", "group": "g-two", "state": "SUCCEEDED",
           "varied": {"server.flags.--itl-ms": "5"}}  # fmt: skip
    points = [{"output_throughput": 80.0}, {"output_throughput": 90.0}]
    attempt = {"id": "x-1-a1", "number": 1, "host": "h", "state": "SUCCEEDED",
               "created_at": 100.0, "finished_at": 110.0, "result": {"points": points}}  # fmt: skip
    effect = {"change": "--itl-ms=5", "metric": "output_throughput", "point": "c1",
              "ratio": 1.5, "ci95": [0.4, 0.6], "verdict": "better"}  # fmt: skip
    document = {"experiments": [row], "effects": [effect]}
    plans = plans_for(document, {"x-1": [attempt]})
    first, second = MlflowSink(mlflow.uri, "two"), MlflowSink(mlflow.uri, "two")
    assert first.known_runs() == {} and second.known_runs() == {}  # both caches read, empty
    made = first.write(plans)
    assert [d.written for d in made] == [True, True]
    again = second.write(plans)  # its cache predates the runs: it finds them in MLflow
    assert [(d.run_id, d.written) for d in again] == [(d.run_id, False) for d in made]
    # an update from the second writer goes into the same runs, and is MLflow's latest
    updated = plans_for({**document, "effects": [{**effect, "ratio": 1.2}]}, {"x-1": [attempt]})
    third = MlflowSink(mlflow.uri, "two")
    assert [d.run_id for d in third.write(updated)] == [d.run_id for d in made]
    runs = mlflow.runs("two")
    assert sorted(r["tags"]["tunelab.key"] for r in runs) == ["attempt:x-1-a1", "group:g-two"]
    parent = one_run(mlflow, "two", "group:g-two")
    assert parent["metrics"]["effect/--itl-ms_5/output_throughput/c1/ratio"] == 1.2


def test_export_to_nothing_listening_says_so_in_one_line(lab: Lab) -> None:
    lab.start_controller()
    lab.add_agent("a")
    spec = ablation("mlf-down", repeat=1, requests=2)
    spec.pop("ablation")
    group = submit(lab, spec)
    assert lab.controller is not None
    secret_uri = f"http://user:hunter2@127.0.0.1:{free_port()}"
    done = lab.controller.cli("export", "mlflow", group, "--tracking-uri", secret_uri)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr + done.stdout
    assert done.stderr.startswith("tunelab: MLflow at http://127.0.0.1:"), done.stderr


def test_automatic_export_waits_for_mlflow_then_delivers_each_attempt_once(
    lab: Lab, tmp_path: Path
) -> None:
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    lab.start_controller(
        TUNELAB_CONTROLLER_MLFLOW_TRACKING_URI=uri,
        TUNELAB_CONTROLLER_MLFLOW_EXPERIMENT="auto",
        TUNELAB_CONTROLLER_MLFLOW_INTERVAL="0.5s",
    )
    lab.add_agent("a")
    group = submit(lab, ablation("mlf-auto", repeat=1, requests=2))  # MLflow is down meanwhile
    assert lab.controller is not None
    listed = lab.controller.cli_json("ls", "--group", group)
    first = lab.controller.cli_json("show", listed[0]["id"])
    assert [a["mlflow_run_url"] for a in first["attempts"]] == [None]  # not exported yet
    server = MlflowServer(tmp_path / "mlflow-late", port=port).start()
    try:
        deadline = time.monotonic() + 90
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                runs = mlflow_runs(server, "auto")
            except OSError:
                runs = []
            if len([r for r in runs if r["tags"]["tunelab.key"].startswith("attempt:")]) == 2:
                break
            time.sleep(0.5)
        keys = [r["tags"]["tunelab.key"] for r in runs]
        assert sorted(keys) == sorted(set(keys)) and len(keys) == 3, keys  # parent + 2, once
        ids = [e["id"] for e in listed]
        shown = show_urls(lab, ids, deadline)
        assert all(url.startswith(f"{uri}/#/experiments/") for url in shown), shown
        text = lab.controller.cli("show", ids[0])
        assert "MLflow: http://127.0.0.1:" in text.stdout
        assert "mlflow_export_failed" in lab.controller.log()  # said while it was down
        time.sleep(2.0)  # a few more passes of the exporter: nothing is written again
        assert len(mlflow_runs(server, "auto")) == 3
    finally:
        server.stop()


def mlflow_runs(server: MlflowServer, experiment: str) -> list[dict[str, Any]]:
    try:
        return server.runs(experiment)
    except Exception:  # the experiment does not exist yet: MLflow answers 404
        return []


def show_urls(lab: Lab, ids: list[str], deadline: float) -> list[str]:
    """Each attempt's MLflow link as ``show --json`` has it, once every one has its link."""
    assert lab.controller is not None
    urls: list[str] = []
    while time.monotonic() < deadline:
        urls = [
            str(a.get("mlflow_run_url") or "")
            for i in ids
            for a in lab.controller.cli_json("show", i)["attempts"]
        ]
        if urls and all(urls):
            return urls
        time.sleep(0.5)
    return urls


def test_mlflow_extra_missing_names_the_install(tmp_path: Path) -> None:
    """Without the client, the command names the extra instead of failing on an import."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "mlflow").mkdir()
    (blocker / "mlflow" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    code = (
        "from tunelab.analysis.mlflow.sink import MlflowSink, MlflowUnavailable\n"
        "try:\n    MlflowSink('http://127.0.0.1:1', 'x')\n"
        "except MlflowUnavailable as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
    )
    assert done.stdout.strip() == "MLflow export needs its client: pip install 'tunelab[mlflow]'"
