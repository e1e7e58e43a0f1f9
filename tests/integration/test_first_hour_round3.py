"""Integration: issue 37's first hour, round 3 — following and stopping by the names a user has
at hand, through the real console script ``tunelab`` against a real controller and agent."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.test_cli_first_hour import SIGINT_AT_DEFAULT, TUNELAB, Lab
from tests.support.daemon_proc import REPO

SEARCH = REPO / "examples" / "search-sim.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("round3"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def parked_search(lab: Lab, name: str) -> Path:
    """The example search on hosts nobody has: it stays RUNNING with its first trial queued."""
    doc = yaml.safe_load(SEARCH.read_text())
    doc["name"] = name
    doc["host"] = {"labels": {"pool": "nobody"}}
    path = lab.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def parked_group(lab: Lab, name: str) -> str:
    """A spec of 3 experiments on hosts nobody has, queued; its group."""
    path = lab.spec(name, **{"host.labels.pool": "nobody", "repeat": 3})
    submitted = lab.run("submit", str(path), "--json")
    assert submitted.returncode == 0, submitted.stderr
    groups: set[str] = {e["group"] for e in json.loads(submitted.stdout)}
    assert len(groups) == 1
    return groups.pop()


def test_search_show_cancel_and_ls_take_the_specs_name(lab: Lab) -> None:
    first = lab.run("submit", str(parked_search(lab, "named-search")), "--json")
    latest = lab.run("submit", str(parked_search(lab, "named-search")), "--json")
    assert first.returncode == 0 and latest.returncode == 0, first.stderr + latest.stderr
    group = json.loads(latest.stdout)["search_group"]
    shown = lab.run("search", "show", "named-search", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["group"] == group  # the latest submission of the name
    listed = lab.run("ls", "--group", "named-search", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert rows and {r["group"] for r in rows} == {group}
    cancelled = lab.run("search", "cancel", "named-search")
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancel requested for search {group}" in cancelled.stderr
    unknown = lab.run("search", "show", "no-such-search")
    assert unknown.returncode == 4 and "no search 'no-such-search'" in unknown.stderr


def test_search_cancel_of_a_finished_search_says_it_is_finished(lab: Lab) -> None:
    group = json.loads(lab.run("submit", str(parked_search(lab, "ends")), "--json").stdout)[
        "search_group"
    ]
    assert lab.run("search", "cancel", group).returncode == 0
    deadline = time.monotonic() + 60
    while json.loads(lab.run("search", "show", group, "--json").stdout)["state"] == "RUNNING":
        assert time.monotonic() < deadline, "the cancelled search never ended"
        time.sleep(0.2)
    again = lab.run("search", "cancel", group)
    assert again.returncode == 0, again.stderr
    assert f"search {group} is already finished (CANCELLED); nothing to cancel" in again.stderr
    assert "cancel requested" not in again.stderr


def test_cancel_takes_a_group_and_a_specs_name(lab: Lab) -> None:
    group = parked_group(lab, "three")
    by_group = lab.run("cancel", group)
    assert by_group.returncode == 0, by_group.stderr
    assert by_group.stdout.count("CANCELLED") == 3, by_group.stdout
    parked_group(lab, "three-more")
    latest = parked_group(lab, "three-more")
    by_name = lab.run("cancel", "three-more")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.count("CANCELLED") == 3, by_name.stdout
    states = {
        (e["group"], e["state"]) for e in json.loads(lab.run("ls", "--json").stdout)
        if e["name"].startswith("three-more")
    }  # fmt: skip
    assert (latest, "CANCELLED") in states and any(s == "QUEUED" for _, s in states)


def test_cancel_of_a_searchs_name_cancels_the_search(lab: Lab) -> None:
    group = json.loads(lab.run("submit", str(parked_search(lab, "stop-me")), "--json").stdout)[
        "search_group"
    ]
    result = lab.run("cancel", "stop-me")
    assert result.returncode == 0, result.stderr
    assert f"cancel requested for search {group}" in result.stderr


def _interrupted_on_a_terminal(lab: Lab, args: list[str], ready: str) -> str:
    """Run ``tunelab`` with stdout and stderr on one pseudo-terminal, press Ctrl-C once
    ``ready`` is on the screen; the screen as written."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*SIGINT_AT_DEFAULT, TUNELAB, *args], stdout=follower, stderr=follower, env=lab.env()
    )
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + 60
    while ready.encode() not in screen:
        assert time.monotonic() < deadline, screen.decode(errors="replace")
        screen += os.read(leader, 65536)
    time.sleep(0.5)  # a poll or two with the progress line up
    proc.send_signal(signal.SIGINT)
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        screen += data
    os.close(leader)
    assert proc.wait(30) == 130, screen.decode(errors="replace")
    return screen.decode(errors="replace")


def test_ctrl_c_on_a_search_wait_says_it_goes_on_on_its_own_line(lab: Lab) -> None:
    screen = _interrupted_on_a_terminal(
        lab, ["submit", str(parked_search(lab, "follow-me")), "--wait"], "trials ended"
    )
    message = re.search(
        r"(?s)(.?)tunelab: stopped following; the search goes on\. Follow it again with:\s+"
        r"tunelab\s+wait\s+(g-\w+)",  # wrapped to the terminal's width
        screen,
    )
    assert message is not None, screen
    assert message.group(1) == "\n", repr(screen[-400:])  # not over the progress line
    assert lab.run("search", "cancel", message.group(2)).returncode == 0
