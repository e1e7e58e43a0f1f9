"""E2E: results into a real MLflow tracking server (``mlflow server``, SQLite backend, a local
artifact folder, on loopback) — by hand with ``tunelab export mlflow`` and automatically from
the controller (``--mlflow-tracking-uri``), read back through MLflow's REST API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Lab
from tests.support.mlflow_server import MlflowServer
from tests.support.ports import free_port

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


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield server
    finally:
        server.stop()


def submit(lab: Lab, spec: dict[str, Any]) -> str:
    assert lab.controller is not None
    path = lab.root / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = lab.controller.cli("submit", str(path), "--wait", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    experiments = json.loads(done.stdout)
    return str(experiments[0]["group"])


def export(lab: Lab, group: str, uri: str, experiment: str) -> dict[str, Any]:
    assert lab.controller is not None
    done = lab.controller.cli(
        "export", "mlflow", group, "--tracking-uri", uri, "--experiment", experiment, "--json"
    )
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
        "from tunelab.controller.mlflowsink import MlflowSink, MlflowUnavailable\n"
        "try:\n    MlflowSink('http://127.0.0.1:1', 'x')\n"
        "except MlflowUnavailable as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
    )
    assert done.stdout.strip() == "MLflow export needs its client: pip install 'tunelab[mlflow]'"
