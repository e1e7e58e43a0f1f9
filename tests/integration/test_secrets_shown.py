"""Integration: a real controller never hands a spec's secrets to ``tunelab show`` (issue 23.8).

The 30 planted secrets of tests/unit/test_redaction.py are submitted to a real ``tunelab
controller serve``; ``tunelab show --json`` and ``tunelab show`` (the real CLI, as a process)
print none of them, and the tuning flags keep their values. Run for real on an agent and the
simulator, neither does the HTML report nor ``compare --json`` (nor, built the same way, the
MLflow exporter's comparison.json and report.html)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tests.unit.test_redaction import PLANTED, planted_spec
from tunelab.analysis.report import report_bytes
from tunelab.controller.mlflow.export import group_export
from tunelab.controller.spec import expand_text
from tunelab.controller.store.factory import open_store
from tunelab.v1 import controller_pb2

NVML = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200-busy.json"


def test_show_prints_none_of_the_planted_secrets(tmp_path: Path) -> None:
    controller = ControllerProcess(tmp_path / "controller").start()
    try:
        waits = "name: secrets\nhost: {labels: {pool: none}}"  # queued: no host matches
        spec = planted_spec().replace("name: secrets", waits)
        [queued] = (
            controller.stub()
            .SubmitExperiments(controller_pb2.SubmitExperimentsRequest(spec_yaml=spec), timeout=10)
            .experiments
        )
        shown = controller.cli("show", queued.id, "--json")
        text = controller.cli("show", queued.id)
        assert shown.returncode == 0 and text.returncode == 0, shown.stderr + text.stderr
        for output in (shown.stdout, text.stdout):
            leaked = [name for name, value in PLANTED.items() if value in output]
            assert leaked == []
        [experiment] = (
            json.loads(shown.stdout)
            if shown.stdout.lstrip().startswith("[")
            else [json.loads(shown.stdout)]
        )
        assert experiment["spec"]["server"]["flags"]["--max-total-tokens"] == 65536
        assert "--max-num-batched-tokens 8192" in text.stdout
    finally:
        controller.terminate()


# Stands in for an engine that takes the planted flags: drops them and runs the simulator on the
# flags that come after the marker (the spec's ``flags``, which the agent appends).
ENGINE = """import sys
from tunelab.bench.simulator.app import main
sys.exit(main(sys.argv[sys.argv.index("--planted-end") + 1:]))
"""


def _planted_run(engine: Path) -> dict[str, Any]:
    """The planted spec of tests/unit/test_redaction.py, run for real: its server argv carries
    every planted flag and header, its env every planted variable and ``redact:``'s name."""
    [planted] = expand_text(planted_spec())
    server = planted.spec["server"]
    argv = list(server["command"][3:])  # after [vllm, serve, /m]
    argv += ["-k", PLANTED["-k"], "-H", f"Authorization: Bearer {PLANTED['Authorization']}"]
    argv += ["--internal-seed", "spec-listed-secret"]  # a flag only redact: names
    return {
        "name": "secrets-run",
        "redact": ["INTERNAL_SEED"],
        "host": {"labels": {"pool": "secrets"}},
        "server": {
            "command": [sys.executable, str(engine), *argv, "--planted-end"],
            "flags": {"--port": "{port}", "--startup-seconds": 0.2, "--model": "sim"},
            "env": server["env"],
            "ready": {"model": "sim", "timeout": "1m"},
            "stop_grace": "5s",
        },
        "benchmark": {"concurrency": [1], "requests": 4, "input_len": 16, "output_len": 8},
        "max_duration": "3m",
    }


def test_the_report_and_compare_json_of_a_real_run_print_none_of_the_planted_secrets(
    tmp_path: Path,
) -> None:
    """Before: ``CompareRuns`` compared the store's raw rows, so the report's provenance held
    the spec's ``redact:`` value in clear; and until issue 36 the agent never saw that list, so
    its ``server_started`` log line showed a flag named there with its value."""
    engine = tmp_path / "engine.py"
    engine.write_text(ENGINE)
    controller = ControllerProcess(tmp_path / "controller").start()
    agent = AgentProcess(tmp_path / "agent", ["--nvml-snapshot", str(NVML)])
    try:
        agent.start()
        added = controller.cli("hosts", "add", "local", agent.address, "--label", "pool=secrets")
        assert added.returncode == 0, added.stderr
        spec = tmp_path / "spec.yaml"
        spec.write_text(yaml.safe_dump(_planted_run(engine), sort_keys=False))
        submitted = controller.cli("submit", str(spec), "--wait", "--json", timeout=170)
        [done] = json.loads(submitted.stdout)
        assert done["state"] == "SUCCEEDED", submitted.stdout + agent.log()[-3000:]
        recorded = json.dumps(done["attempts"][-1]["provenance"])
        assert "INTERNAL_SEED" in recorded and "--api-key" in recorded  # the run recorded them

        report = tmp_path / "report.html"
        written = controller.cli("report", done["id"], "--out", str(report), "--no-profiles")
        compared = controller.cli("compare", done["id"], "--json")
        assert written.returncode == 0 and compared.returncode == 0, written.stderr
        html = report.read_text()
        assert "INTERNAL_SEED" in html and "8192" in html  # the env and argv are shown...
        for output in (html, compared.stdout):
            leaked = [name for name, value in PLANTED.items() if value in output]
            assert leaked == []  # ...and none of the 30
            assert "spec-listed-secret" not in output
        # the MLflow exporter's artifacts, from the same store: comparison.json, the attempts,
        # report.html
        store = open_store(str(controller.db))
        try:
            row = store.get_experiment(done["id"])
            assert row is not None
            document, attempts, reports = group_export(
                [(row, store.attempts_for(row.id))], report_bytes
            )
        finally:
            store.close()
        artifacts = json.dumps([document, attempts]) + b"".join(reports.values()).decode()
        assert "INTERNAL_SEED" in artifacts and reports
        assert [name for name, value in PLANTED.items() if value in artifacts] == []
        assert "spec-listed-secret" not in artifacts
        log = agent.log()
        assert "server_started" in log and "--internal-seed" in log
        assert [name for name, value in PLANTED.items() if value in log] == []
        assert "spec-listed-secret" not in log
    finally:
        agent.terminate()
        controller.terminate()
