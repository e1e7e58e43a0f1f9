"""Integration (issue 35 item 6): ``benchmark.tokenizer`` in a spec, through the real console
script, controller and agent, with the simulator as the server. With a tokenizer from the
agent's datasets folder every prompt reaches the server at the length asked for (the
simulator's ``usage.prompt_tokens``), the provenance names the tokenizer by content, and no
warning is given; without one the result warns that lengths are approximate and ``show``
prints the server's own mean prompt tokens beside that. A path outside the datasets folder is
refused at submission, naming the field."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tests.support.tiny_tokenizer import write_tokenizer

TUNELAB = str(Path(sys.executable).with_name("tunelab"))


class Lab:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.controller = ControllerProcess(root / "controller").start()
        self.agent = AgentProcess(root / "agent").start()
        self.tokenizer = write_tokenizer(self.agent.state_dir / "datasets" / "tiny", bos=False)
        added = self.run("hosts", "add", "local", self.agent.address, "--label", "pool=tok")
        assert added.returncode == 0, added.stderr

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TUNELAB_CONTROLLER": self.controller.address,
            "XDG_CONFIG_HOME": str(self.root / "cfg"),
            "XDG_STATE_HOME": str(self.root / "state"),
        }
        return subprocess.run(
            [TUNELAB, *args], cwd=self.root, capture_output=True, text=True, timeout=180, env=env
        )

    def spec(self, name: str, **benchmark: Any) -> Path:
        doc = {
            "name": name,
            "host": {"labels": {"pool": "tok"}},
            "server": {
                "command": ["{python}", "-P", "-m", "tunelab.bench.simulator"],
                "flags": {
                    "--port": "{port}",
                    "--startup-seconds": 0.1,
                    "--model": "sim",
                    "--ttft-ms": 2,
                    "--itl-ms": 1,
                },
                "port": "auto",
                "ready": {"path": "/health", "model": "sim", "timeout": "1m"},
            },
            "benchmark": {
                "concurrency": [2],
                "requests": 12,
                "input_len": 40,
                "output_len": 4,
                "range_ratio": 0.5,
                **benchmark,
            },
            "max_duration": "5m",
        }
        target = self.root / f"{name}.yaml"
        target.write_text(yaml.safe_dump(doc, sort_keys=False))
        return target

    def submitted(self, path: Path) -> dict[str, Any]:
        done = self.run("submit", str(path), "--wait", "--json")
        assert done.returncode == 0, done.stderr
        [experiment] = json.loads(done.stdout)
        assert experiment["state"] == "SUCCEEDED", experiment
        shown = self.run("show", experiment["id"], "--json")
        assert shown.returncode == 0, shown.stderr
        data: dict[str, Any] = json.loads(shown.stdout)
        return data


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("tokenizer"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def test_a_spec_tokenizer_makes_every_prompt_length_exact_at_the_server(lab: Lab) -> None:
    data = lab.submitted(lab.spec("exact", tokenizer="tiny"))
    [attempt] = data["attempts"]
    result = attempt["result"]
    [point] = result["points"]
    assert point["completed"] == 12
    # the server's count, request by request, is what was asked (lengths drawn in [20, 60])
    assert point["min_input_tokens"] == point["min_input_len_requested"]
    assert point["max_input_tokens"] == point["max_input_len_requested"]
    assert point["mean_input_tokens"] == point["mean_input_len_requested"]
    assert point["min_input_tokens"] < point["max_input_tokens"]
    assert result["dataset"]["lengths_exact"] is True
    assert not any("approximate" in w for w in result["warnings"])
    sha = hashlib.sha256(lab.tokenizer.read_bytes()).hexdigest()
    parameters = attempt["provenance"]["benchmark"]["dataset"]["parameters"]
    assert parameters["tokenizer_file"] == "tiny" and parameters["tokenizer_sha256"] == sha
    shown = lab.run("show", data["id"])
    line = f"prompt tokens (server's count): mean {point['mean_input_tokens']:,.1f} per request"
    assert f"    {line}\n" in shown.stdout


def test_without_a_tokenizer_the_result_warns_and_show_says_so(lab: Lab) -> None:
    data = lab.submitted(lab.spec("words"))
    result = data["attempts"][0]["result"]
    assert result["dataset"]["lengths_exact"] is False
    assert any(w.startswith("lengths are approximate") for w in result["warnings"])
    mean = result["points"][0]["mean_input_tokens"]
    shown = lab.run("show", data["id"])
    assert (
        f"prompt tokens (server's count): mean {mean:,.1f} per request; lengths approximate: "
        "no tokenizer" in shown.stdout
    )


def test_a_tokenizer_outside_the_datasets_folder_is_refused_at_submission(lab: Lab) -> None:
    refused = lab.run("submit", str(lab.spec("outside", tokenizer="/etc/tiny")), "--dry-run")
    assert refused.returncode == 2
    assert "benchmark.tokenizer" in refused.stderr
    assert "must be a relative path inside the agent's datasets folder" in refused.stderr
