"""Integration (issue 46, item 3): mistakes caught before a model load, through the real CLI
against a real agent and controller: engine flag typos refused with "did you mean" at
``--dry-run``, at submission and at the agent; a server whose port is not the probed one said
at once (both in the argv) or within seconds of its log saying so (not at the startup timeout);
a refused flag's failure said once; the flag that serves a ready model listed by its path; a
watch spec checked without a controller and pointed at ``watch add`` by ``submit``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.integration.test_cli_first_hour import DEAD, Lab
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port

FAKE = str(REPO / "tests" / "fakes" / "lifecycle_server.py")
TYPOS = {
    "--max-num-seq": "did you mean --max-num-seqs?",
    "--gpu-memory-utilisation": "did you mean --gpu-memory-utilization?",
    "--max-num-batched-token": "did you mean --max-num-batched-tokens?",
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("round4"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def write(lab: Lab, name: str, doc: dict[str, Any]) -> str:
    path = lab.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def vllm_spec(lab: Lab) -> str:
    return write(lab, "typos", {
        "name": "typos",
        "host": {"labels": {"pool": "first"}},
        "server": {
            "command": ["vllm", "serve", "/models/llama"],
            "flags": {"--port": "{port}", "--max-num-seq": 64, "--gpu-memory-utilisation": 0.9},
            "ready": {"model": "llama"},
        },
        "benchmark": {"concurrency": [1], "requests": 4},
        "matrix": {"server.flags.--max-num-batched-token": [2048, 8192]},
    })  # fmt: skip


def test_flag_typos_are_refused_at_dry_run_and_at_submission(lab: Lab) -> None:
    spec = vllm_spec(lab)
    dry = lab.run("submit", spec, "--dry-run", TUNELAB_CONTROLLER=DEAD)
    submitted = lab.run("submit", spec)
    for result in (dry, submitted):
        assert result.returncode == 2, result.stdout + result.stderr
        for flag, hint in TYPOS.items():
            assert f"{flag}: not a flag of vllm 0.33.0; {hint}" in result.stderr, result.stderr
    listed = lab.run("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert not [e for e in json.loads(listed.stdout) if e["name"].startswith("typos")]


def test_the_agent_refuses_a_flag_typo_before_starting_anything(lab: Lab) -> None:
    port = str(free_port())
    result = lab.run(
        "server", "start", "--name", "typo", "--port", port, "--",
        "vllm", "serve", "/models/llama", "--max-num-seq", "8", "--port", port,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--max-num-seq: not a flag of vllm 0.33.0; did you mean --max-num-seqs?" in (
        result.stderr
    )
    assert lab.run("server", "status", "typo").returncode != 0  # nothing was started


def test_a_program_that_is_no_known_engine_is_not_checked(lab: Lab) -> None:
    """The simulator's argparse takes --max-num-seq for its --max-num-seqs: no false refusal."""
    port = str(free_port())
    result = lab.run(
        "server", "start", "--name", "own-flags", "--port", port, "--wait", "--",
        "{python}", "-m", "tunelab.bench.simulator", "--port", port, "--max-num-seq", "4",
        "--startup-seconds", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "READY" in result.stdout
    assert lab.run("server", "stop", "own-flags").returncode == 0


def test_a_port_mismatch_in_the_argv_is_refused_at_once(lab: Lab) -> None:
    probed, listens = free_port(), free_port()
    result = lab.run(
        "server", "start", "--port", str(probed), "--",
        "{python}", "-m", "tunelab.bench.simulator", "--port", str(listens),
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    said = f"--port {listens}: the server would listen on {listens}, but its readiness probe"
    assert said in result.stderr and f"uses port {probed}" in result.stderr
    spec = write(lab, "ports", {
        "name": "ports",
        "server": {"command": ["{python}", "-m", "tunelab.bench.simulator"],
                   "flags": {"--port": listens}, "port": probed, "ready": {"model": "sim"}},
        "benchmark": {"concurrency": [1], "requests": 2},
    })  # fmt: skip
    dry = lab.run("submit", spec, "--dry-run", TUNELAB_CONTROLLER=DEAD)
    assert dry.returncode == 2 and said in dry.stderr, dry.stderr


def test_a_server_whose_log_says_another_port_fails_in_seconds(lab: Lab) -> None:
    """The argv names the probed port, but the server listens elsewhere (its own config): the
    agent reads the port from its log and fails it, instead of waiting the startup timeout
    (30 s here, so that a regression fails fast, with the timeout's reason)."""
    probed, listens = free_port(), free_port()
    result = lab.run(
        "server", "start", "--name", "elsewhere", "--port", str(probed),
        "--startup-timeout", "30s", "--wait", "--",
        "{python}", FAKE, "--port", str(probed), "--listen-port", str(listens),
        "--load-seconds", "0.2",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED" in result.stdout
    assert f"the server is ready on port {listens}" in result.stdout, result.stdout
    assert f"the readiness probe uses port {probed}" in result.stdout
    assert "startup timeout" not in result.stdout


def test_a_refused_flag_is_said_once_without_the_usage_fragments(lab: Lab) -> None:
    port = str(free_port())
    result = lab.run(
        "server", "start", "--name", "itl", "--port", port, "--wait", "--",
        "{python}", "-m", "tunelab.bench.simulator", "--port", port, "--itl-msec", "5",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("unrecognized arguments: --itl-msec 5") == 1, result.stdout
    assert "[--" not in result.stdout and "usage:" not in result.stdout, result.stdout
    assert "usage lines left out: tunelab server logs" in result.stdout


def test_a_ready_model_served_by_its_path_names_the_flag(lab: Lab) -> None:
    port = str(free_port())
    result = lab.run(
        "server", "start", "--port", port, "--ready-model", "glm-5", "--grace", "2s", "--wait",
        "--", "{python}", "-m", "tunelab.bench.simulator", "--port", port,
        "--model", "/models/GLM-5", "--startup-seconds", "0",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "does not serve model 'glm-5'" in result.stdout
    assert "add --served-model-name glm-5 to the server's flags" in result.stdout, result.stdout


def test_a_watch_spec_is_checked_without_a_controller_and_not_submitted(lab: Lab) -> None:
    doc = yaml.safe_load((REPO / "examples" / "demo-ablation.yaml").read_text())
    doc.pop("ablation")
    doc["name"] = "nightly"
    doc["watch"] = {"every": "5 s", "metrics": ["output_throughput"]}
    spec = write(lab, "nightly", doc)
    checked = lab.run("watch", "add", "--dry-run", spec, TUNELAB_CONTROLLER=DEAD)
    assert checked.returncode == 0, checked.stderr
    assert "valid: watch nightly (nothing added)" in checked.stdout
    assert "every 5s" in checked.stdout  # "5 s" is five seconds, not a cron line
    as_json = lab.run("watch", "add", "--dry-run", "--json", spec, TUNELAB_CONTROLLER=DEAD)
    assert json.loads(as_json.stdout)["spec"]["period"] == 5.0
    for result in (
        lab.run("submit", spec, "--dry-run", TUNELAB_CONTROLLER=DEAD),
        lab.run("submit", spec),
    ):
        assert result.returncode == 2, result.stdout + result.stderr
        assert "tunelab watch add" in result.stderr, result.stderr
        assert "unknown key" not in result.stderr
    listed = lab.run("watch", "ls", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout
    doc["serverr"] = doc.pop("server")
    typo = lab.run("submit", write(lab, "typo", {k: v for k, v in doc.items() if k != "watch"}),
                   "--dry-run", TUNELAB_CONTROLLER=DEAD)  # fmt: skip
    assert "search" in typo.stderr and "watch" in typo.stderr  # the keys a spec may have


def test_an_experiment_whose_server_refuses_a_flag_says_it_once(lab: Lab) -> None:
    """The run's message had argparse's usage fragments and the error line twice."""
    spec = lab.spec("itl-run", **{"server.flags.--itl-msec": 5})
    result = lab.run("submit", str(spec), "--wait")
    assert result.returncode == 1, result.stdout + result.stderr
    joined = " ".join(result.stdout.split())  # a long message is wrapped at 100 columns
    said = joined.count("unrecognized arguments")
    assert said >= 1 and joined.count("unrecognized arguments: --itl-msec 5") == said, joined
    for message in joined.split("unrecognized arguments: --itl-msec 5")[1:]:
        assert not message.lstrip().startswith("--itl-msec"), joined  # the error once, not twice
    assert "[--" not in result.stdout, result.stdout
