"""Integration: a real controller never hands a spec's secrets to ``tunelab show`` (issue 23.8).

The 28 planted secrets of tests/unit/test_redaction.py are submitted to a real ``tunelab
controller serve``; ``tunelab show --json`` and ``tunelab show`` (the real CLI, as a process)
print none of them, and the tuning flags keep their values."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.controller_proc import ControllerProcess
from tests.unit.test_redaction import PLANTED, planted_spec
from tunelab.v1 import controller_pb2


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
