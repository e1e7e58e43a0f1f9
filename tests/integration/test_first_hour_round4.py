"""Integration: issue 46's first hour, round 4 — every command that takes a group takes the spec's
name or the group alike and means the same thing, and an experiment's id means that experiment;
through the real console script ``tunelab`` against a real controller and agent."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_cli_first_hour import TUNELAB, Lab
from tests.integration.test_first_hour_round3 import SEARCH, parked_search
from tests.support.mlflow_server import MlflowServer


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("round4"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def loads(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result))


def ablation(lab: Lab, name: str) -> tuple[str, list[str], list[str]]:
    """A finished ablation of two experiments (the baseline and one change): its group, their
    ids and names."""
    path = lab.spec(name, ablation=[{"server.flags.--itl-ms": 5}])
    done = loads(lab.run("submit", str(path), "--wait", "--json"))
    assert [e["state"] for e in done] == ["SUCCEEDED", "SUCCEEDED"]
    return done[0]["group"], [e["id"] for e in done], [e["name"] for e in done]


@pytest.fixture(scope="module")
def alike(lab: Lab) -> tuple[str, list[str], list[str]]:
    return ablation(lab, "alike")


def test_wait_show_and_compare_read_a_name_as_its_group_and_an_id_as_one(
    lab: Lab, alike: tuple[str, list[str], list[str]]
) -> None:
    group, ids, _ = alike
    one = ids[1]
    for words in (["wait"], ["show"], ["compare"]):
        by_name, by_group = (loads(lab.run(*words, key, "--json")) for key in ("alike", group))
        alone = loads(lab.run(*words, one, "--json"))
        if words == ["compare"]:
            by_name, by_group, alone = (d["experiments"] for d in (by_name, by_group, alone))
        assert {e["id"] for e in by_name} == {e["id"] for e in by_group} == set(ids), words
        single = alone if isinstance(alone, list) else [alone]
        assert [e["id"] for e in single] == [one], words


def test_report_reads_a_name_as_its_group_and_an_id_as_one(
    lab: Lab, alike: tuple[str, list[str], list[str]]
) -> None:
    group, ids, names = alike
    pages = {}
    for key in ("alike", group, ids[1]):
        out = lab.root / f"report-{key}.html"
        assert "report:" in ok(lab.run("report", key, "--out", str(out), "--no-profiles"))
        pages[key] = out.read_text()
    for key in ("alike", group):
        assert all(n in pages[key] for n in names) and "<h1>tunelab report: " in pages[key]
    assert names[0] not in pages[ids[1]]


def test_export_reads_a_name_as_its_group_and_an_id_as_one(
    lab: Lab, alike: tuple[str, list[str], list[str]], mlflow: MlflowServer
) -> None:
    group, ids, _ = alike
    exported = {}
    for key in ("alike", group, ids[1]):
        doc = loads(lab.run("export", "mlflow", key, "--tracking-uri", mlflow.uri, "--json"))
        exported[key] = {r["run_id"] for r in doc["runs"]}
    assert exported["alike"] == exported[group]  # the same runs: the second wrote nothing
    assert exported[ids[1]] < exported[group]


def test_cancel_and_search_read_a_name_as_its_group_and_an_id_as_one(
    lab: Lab, alike: tuple[str, list[str], list[str]]
) -> None:
    group, ids, _ = alike
    cancelled = [ok(lab.run("cancel", key)) for key in ("alike", group)]
    assert cancelled[0] == cancelled[1] and cancelled[0].count("SUCCEEDED") == 2
    assert ok(lab.run("cancel", ids[1])).count("SUCCEEDED") == 1
    for key in ("alike", group):
        missing = lab.run("search", "show", key)
        assert missing.returncode == 4 and "no search" in missing.stderr


def test_a_searchs_name_its_group_and_a_trial_name_the_search(lab: Lab) -> None:
    group = loads(lab.run("submit", str(parked_search(lab, "alike-search")), "--json"))[
        "search_group"
    ]
    trial = loads(lab.run("ls", "--group", group, "--json"))[0]["id"]
    for key in ("alike-search", group, trial):
        assert loads(lab.run("search", "show", key, "--json"))["group"] == group, key
    for key in ("alike-search", group):
        assert loads(lab.run("show", key, "--json"))["group"] == group, key
        assert f"search {group} (alike-search): RUNNING" in ok(lab.run("show", key)), key
        out = lab.root / f"search-{key}.html"
        ok(lab.run("report", key, "--out", str(out), "--no-profiles"))
        assert "<h1>tunelab search report: " in out.read_text()  # not the matrix page
    assert ok(lab.run("cancel", "alike-search")) == ""


def test_wait_on_a_searchs_name_follows_the_search_not_its_first_trials(lab: Lab) -> None:
    """It followed the trials queued when it started and exited while the search went on."""
    group = loads(lab.run("submit", str(parked_search(lab, "follow-name")), "--json"))[
        "search_group"
    ]
    waiting = subprocess.Popen(
        [TUNELAB, "wait", "follow-name", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=lab.env(),
    )  # fmt: skip
    try:
        time.sleep(3)  # past its first look at the search: it is following
        assert waiting.poll() is None, waiting.communicate()
        ok(lab.run("search", "cancel", group))
        out, err = waiting.communicate(timeout=120)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    doc = json.loads(out)
    assert isinstance(doc, dict), out  # the search document, not a list of trials
    assert doc["group"] == group and doc["state"] == "CANCELLED", err


def test_a_watchs_name_its_occurrences_group_and_an_experiment_name_the_watch(lab: Lab) -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "watch-sim.yaml").read_text())
    doc["name"] = "alike-watch"
    doc["host"] = {"labels": {"pool": "nobody"}}  # the first occurrence stays queued
    spec = lab.root / "alike-watch.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    ok(lab.run("watch", "add", str(spec)))
    deadline = time.monotonic() + 60
    while not (occurrences := loads(lab.run("watch", "show", "alike-watch", "--json"))[
        "occurrences"
    ]):  # fmt: skip
        assert time.monotonic() < deadline, "no occurrence queued"
        time.sleep(0.5)
    group = occurrences[0]["group"]
    experiment = loads(lab.run("ls", "--group", group, "--json"))[0]["id"]
    for key in ("alike-watch", group, experiment):
        shown = loads(lab.run("watch", "show", key, "--json"))
        assert shown["name"] == "alike-watch", key
    listed = ok(lab.run("watch", "ls"))
    assert "(#1 running)" in listed, listed  # not "last: -" while it runs
    assert loads(lab.run("show", "alike-watch", "--json"))["name"] == "alike-watch"
    ok(lab.run("watch", "pause", group))
    assert loads(lab.run("watch", "show", experiment, "--json"))["state"] == "paused"
    unknown = lab.run("watch", "show", "no-such-watch")
    assert unknown.returncode == 4 and "no watch 'no-such-watch'" in unknown.stderr
    ok(lab.run("cancel", group))
    ok(lab.run("watch", "rm", "alike-watch"))


# --- item 4: every human output within 100 columns --------------------------------------------


def fits(result: subprocess.CompletedProcess[str], width: int = 100) -> str:
    """Every line of the command's output and errors within ``width``; the output."""
    for line in (result.stdout + result.stderr).splitlines():
        assert len(line) <= width, f"{len(line)} columns: {line}"
    return result.stdout + result.stderr


def test_human_output_fits_100_columns_and_a_wait_reason_is_printed_once(lab: Lab) -> None:
    long = "an-unreachable-gpu-host-with-a-long-name"
    added = lab.run("hosts", "add", long, "10.255.255.1:1", "--label", "pool=far",
                    "--label", "team=inference-platform-research", COLUMNS="100")  # fmt: skip
    assert added.returncode == 0 and "to change it" in fits(added)
    name = "wide-enough-name-for-a-table"  # servers for server ls --all, rows for ls
    path = lab.spec(name, ablation=[{"server.flags.--itl-ms": 5}])
    done = fits(lab.run("submit", str(path), "--wait", COLUMNS="100"))
    assert " ".join(done.split()).endswith(  # an ablation's --wait ends with the next step
        f"next: tunelab compare {name} (the results); tunelab report {name} (one HTML page)"
    )
    spec = lab.spec("far-away", **{"host.labels.pool": "far"})
    follow = subprocess.Popen(
        [TUNELAB, "submit", str(spec), "--wait"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=lab.env(COLUMNS="100"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "failed polls" not in fits(lab.run("ls", COLUMNS="100")):
            assert time.monotonic() < deadline, "the host was never polled"
            time.sleep(0.5)
        time.sleep(6)  # a few more polls, each with a higher count
    finally:
        follow.terminate()
        followed = subprocess.CompletedProcess(follow.args, 0, follow.communicate()[0], "")
    reasons = [x for x in fits(followed).splitlines() if x.startswith("x-")]
    assert len(reasons) <= 3, followed.stdout  # queued, not polled yet, N failed polls: once each
    for args in (
        ["ls"], ["hosts", "ls"], ["server", "ls", "--all"], ["watch", "ls"],
        ["show", name], ["compare", name],
        ["submit", "--dry-run", str(SEARCH)], ["cancel", "far-away"],
        ["show", "no-such-experiment-" + "x" * 80], ["hosts", "rm", "no-such-host"],
        ["ls", "--controller", "127.0.0.1:1"], ["wait", "no-such-group-" + "y" * 90],
    ):  # fmt: skip
        fits(lab.run(*args, COLUMNS="100"))
    assert lab.run("hosts", "rm", long).returncode == 0


def test_export_mlflow_of_a_watch_writes_its_judged_occurrences_not_an_ablation(
    lab: Lab, mlflow: MlflowServer
) -> None:
    """It exported the last occurrence's experiments as a plain group before."""
    doc = yaml.safe_load((Path(__file__).parents[2] / "examples" / "watch-sim.yaml").read_text())
    doc.update(name="exported-watch", host={"labels": {"pool": "first"}})
    doc["server"]["flags"].pop("--speed-file")
    doc["benchmark"]["requests"] = 4
    doc["watch"].update(launches=2, every="1h")
    spec = lab.root / "exported-watch.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    ok(lab.run("watch", "add", str(spec)))
    deadline = time.monotonic() + 120
    while loads(lab.run("watch", "ls", "--json"))[-1]["last_verdict"] != "baseline":
        assert time.monotonic() < deadline, "the first occurrence was never judged"
        time.sleep(1)
    exported = loads(lab.run("export", "mlflow", "exported-watch", "--tracking-uri", mlflow.uri,
                             "--experiment", "watches", "--json"))  # fmt: skip
    assert [r["key"] for r in exported["runs"]] == ["watch:exported-watch:1"]
    again = fits(lab.run("export", "mlflow", "exported-watch", "--tracking-uri", mlflow.uri,
                         "--experiment", "watches", COLUMNS="100"))  # fmt: skip
    assert "unchanged  watch exported-watch #1" in again  # the same key: nothing written twice
    (run,) = mlflow.runs("watches")
    assert run["params"]["watch"] == "exported-watch" and run["params"]["occurrence"] == "1"
    assert run["tags"]["tunelab.verdict"] == "baseline"
    ok(lab.run("watch", "rm", "exported-watch"))
