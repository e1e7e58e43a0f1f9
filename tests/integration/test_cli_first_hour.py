"""Integration: issue 15's first hour — each mistake a new user made, through the real console
script ``tunelab`` against a real agent and controller, asserting the message and the exit code.

Exit codes (README "Exit codes"): 0 ok, 1 the work failed, 2 usage or invalid input, 3 cannot
connect or not authorised, 4 not found.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.agent_proc import AgentProcess
from tests.support.controller_proc import ControllerProcess
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port

TUNELAB = str(Path(sys.executable).with_name("tunelab"))
DEMO_SPEC = REPO / "examples" / "demo-ablation.yaml"
DEAD = "127.0.0.1:1"  # nothing listens on port 1


class Lab:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.controller = ControllerProcess(root / "controller").start()
        # PATH without this venv: the spec must not depend on which python3 comes first
        self.agent = AgentProcess(root / "agent")
        self.agent.env = {"PATH": "/usr/bin:/bin"}
        self.agent.start()
        added = self.run("hosts", "add", "local", self.agent.address, "--label", "pool=first")
        assert added.returncode == 0, added.stderr

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "TUNELAB_CONTROLLER": self.controller.address,
            "TUNELAB_AGENT": self.agent.address,
            "XDG_CONFIG_HOME": str(self.root / "cfg"),
            "XDG_STATE_HOME": str(self.root / "state"),
            **extra,
        }

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TUNELAB, *args], cwd=self.root, capture_output=True, text=True,
            timeout=timeout, env=self.env(**env),
        )  # fmt: skip

    def spec(self, name: str, **changes: Any) -> Path:
        """The demo spec trimmed to one short experiment on this lab's host."""
        doc = yaml.safe_load(DEMO_SPEC.read_text())
        doc.pop("ablation")
        doc.pop("repeat", None)  # one launch: these tests are about the CLI, not statistics
        doc["name"] = name
        doc["host"] = {"labels": {"pool": "first"}}
        doc["server"]["flags"]["--startup-seconds"] = 0.2
        doc["benchmark"] = {"concurrency": [2], "requests": 4, "input_len": 8, "output_len": 8}
        for path, value in changes.items():
            node = doc
            *parents, last = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            if value is None:
                node.pop(last, None)
            else:
                node[last] = value
        target = self.root / f"{name}.yaml"
        target.write_text(yaml.safe_dump(doc, sort_keys=False))
        return target


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("first-hour"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


# --- 1, 2: the local server command and the demo spec run as written ---------------------------


def test_1_a_relative_program_path_says_where_it_was_looked_for(lab: Lab) -> None:
    port = str(free_port())
    result = lab.run(
        "server", "start", "--port", port, "--", ".venv/bin/python", "-m", "tunelab.bench.simulator"
    )
    assert result.returncode == 2
    assert "'.venv/bin/python' not found: a relative path is resolved against" in result.stderr
    assert "{python}" in result.stderr


def test_2_the_demo_spec_runs_on_an_agent_whose_path_has_no_venv(lab: Lab) -> None:
    assert '"{python}"' in DEMO_SPEC.read_text()
    result = lab.run("submit", str(lab.spec("anywhere")), "--wait", "--json")
    assert result.returncode == 0, result.stderr
    assert [e["state"] for e in json.loads(result.stdout)] == ["SUCCEEDED"]


# --- 3, 4: ids and groups are shown, names are accepted, reasons are whole ----------------------


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run with stdout on a pseudo-terminal (as a person would); returns (exit code, output)."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(60), b"".join(chunks).decode(errors="replace")


def test_3_submit_wait_on_a_terminal_prints_group_and_ids_ls_has_groups_compare_takes_the_name(
    lab: Lab,
) -> None:
    code, out = _on_a_terminal([TUNELAB, "submit", str(lab.spec("named")), "--wait"], lab.env())
    assert code == 0, out
    group = re.search(r"queued 1 experiment\(s\), group (g-[0-9a-f]{8})", out)
    assert group is not None, out
    assert re.search(r"x-[0-9a-f]{16}\s+named\s", out)
    listed = lab.run("ls")
    assert listed.stdout.splitlines()[0].split()[:3] == ["ID", "GROUP", "NAME"]
    assert group.group(1) in listed.stdout
    compared = lab.run("compare", "named", "--json")
    assert compared.returncode == 0, compared.stderr
    names = [e["name"] for e in json.loads(compared.stdout)["experiments"]]
    assert names == ["named"]


def test_4_a_long_failure_reason_is_printed_whole(lab: Lab) -> None:
    spec = lab.spec("whole", **{"server.command": ["bin/not-here", "-m", "x"]})
    result = lab.run("submit", str(spec), "--wait")
    assert result.returncode == 1
    cause = "a relative path is resolved against the server's working directory"
    said = [" ".join(text.split()) for text in (result.stdout, result.stderr)]  # wrapped to 100
    assert cause in said[0] and cause in said[1]
    line = ls_row(lab.run("ls").stdout, " whole ")
    assert cause in line and "{python} for the agent's own Python" in line


def ls_row(listed: str, word: str) -> str:
    """The ``tunelab ls`` row holding ``word``, with the lines its message wraps onto (indented
    under it) joined back."""
    lines = listed.splitlines()
    at = next(i for i, x in enumerate(lines) if word in x)
    rest = []
    for x in lines[at + 1 :]:
        if not x.startswith(" "):
            break
        rest.append(x.strip())
    return " ".join([lines[at].rstrip(), *rest])


# --- 5, 6: missing GPU figures and setup mistakes are said at once ------------------------------


def _hint(text: str) -> list[str]:
    """The ``tunelab hosts set ...`` command a message prints, as argv for the console script."""
    found = re.search(r"tunelab (hosts set \S+ --metrics-url URL)", " ".join(text.split()))
    assert found, text
    return found.group(1).split()


def test_5_a_wrong_metrics_url_is_named_in_show(lab: Lab) -> None:
    added = lab.run("hosts", "add", "local", lab.agent.address, "--label", "pool=first",
                    "--replace", "--metrics-url", f"http://{DEAD}/metrics")  # fmt: skip
    assert (
        f"GPU figures from http://{DEAD}/metrics "
        "(to change it: tunelab hosts set local --metrics-url URL)"
        in " ".join(added.stdout.split())
    )
    try:
        spec = lab.spec("nogpu", **{"benchmark.requests": 16, "benchmark.output_len": 32})
        assert lab.run("submit", str(spec), "--wait").returncode == 0
        shown = lab.run("show", "nogpu")
        compared = lab.run("compare", "nogpu")
    finally:
        lab.run("hosts", "add", "local", lab.agent.address, "--label", "pool=first", "--replace")
    assert shown.returncode == 0
    assert f"scrape(s) of http://{DEAD}/metrics failed" in shown.stdout
    assert "--metrics-url" in shown.stdout
    assert "metrics_scrape_failed" in lab.controller.log()
    assert compared.returncode == 0
    warning = " ".join(compared.stdout.split())  # the table wraps long lines
    assert f"no GPU figures from http://{DEAD}/metrics" in warning and "--metrics-url" in warning
    # every hint's command works as written (URL filled in) and keeps the host's labels
    for n, text in enumerate((added.stdout, shown.stdout, compared.stdout)):
        url = f"http://127.0.0.1:{2 + n}/metrics"
        argv = [url if a == "URL" else a for a in _hint(text)]
        fixed = lab.run(*argv)
        assert fixed.returncode == 0, fixed.stderr
        assert f"local: labels pool=first; GPU figures from {url}" in fixed.stdout
        (host,) = json.loads(lab.run("hosts", "ls", "--json").stdout)
        assert host["labels"] == {"pool": "first"} and host["metrics_url"] == url
    # the labels kept, a run that selects on them still finds the host
    spec = lab.spec("after-set")
    assert lab.run("submit", str(spec), "--wait").returncode == 0


def test_hosts_set_changes_one_field_and_keeps_the_rest(lab: Lab) -> None:
    before = json.loads(lab.run("hosts", "ls", "--json").stdout)[0]
    labelled = lab.run("hosts", "set", "local", "--label", "rack=b7", "--json")
    assert labelled.returncode == 0, labelled.stderr
    after = json.loads(labelled.stdout)
    assert after["labels"] == {**before["labels"], "rack": "b7"}
    assert after["metrics_url"] == before["metrics_url"] and after["address"] == before["address"]
    unset = json.loads(lab.run("hosts", "set", "local", "--unset-label", "rack", "--json").stdout)
    assert unset["labels"] == before["labels"]
    default = json.loads(lab.run("hosts", "set", "local", "--metrics-url", "", "--json").stdout)
    assert default["metrics_url"].endswith(":9473/metrics")
    nothing = lab.run("hosts", "set", "local")
    assert nothing.returncode == 2 and "give what to change" in nothing.stderr
    missing = lab.run("hosts", "set", "no-such-host", "--label", "a=b")
    assert missing.returncode == 4 and "no host 'no-such-host'" in missing.stderr
    bad = lab.run("hosts", "set", "local", "--unset-label", "nope")
    assert bad.returncode == 2 and "has no label 'nope'" in bad.stderr
    bad_url = lab.run("hosts", "set", "local", "--metrics-url", "ftp://x/metrics")
    assert bad_url.returncode == 2 and "metrics_url: must start with http://" in bad_url.stderr


def test_6_port_auto_without_port_placeholder_fails_the_dry_run(lab: Lab) -> None:
    spec = lab.spec("noport", **{"server.flags.--port": None})
    result = lab.run("submit", str(spec), "--dry-run", TUNELAB_CONTROLLER=DEAD)
    assert result.returncode == 2
    assert "server.port: auto picks a free port, but nothing passes it" in result.stderr


def test_6_a_wrong_ready_model_fails_in_seconds_not_at_the_startup_timeout(lab: Lab) -> None:
    port = str(free_port())
    started = time.monotonic()
    result = lab.run(
        "server", "start", "--port", port, "--ready-model", "nope", "--grace", "2s", "--wait",
        "--", "{python}", "-m", "tunelab.bench.simulator", "--port", port, "--model", "sim",
        "--startup-seconds", "0",
    )  # fmt: skip
    assert result.returncode == 1
    assert time.monotonic() - started < 30  # the startup timeout is 20 min
    assert "does not serve model 'nope'" in result.stdout and "['sim']" in result.stdout


# --- 7: a controller that goes away is said, and followed again ---------------------------------


def test_7_submit_wait_says_reconnecting_while_the_controller_is_down(tmp_path: Path) -> None:
    lab = Lab(tmp_path)
    try:
        spec = lab.spec("slow", **{"benchmark.requests": 40, "server.flags.--itl-ms": 20})
        proc = subprocess.Popen(
            [TUNELAB, "submit", str(spec), "--wait"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=lab.env(),
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if "BENCHMARKING" in line or "point 1/1" in line:
                break
        lab.controller.terminate()
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.extend(proc.stderr or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + 15
        while not any("reconnecting to the controller" in x for x in seen):
            assert time.monotonic() < deadline, seen
            time.sleep(0.1)
        lab.controller.start()
        assert proc.wait(90) == 0
        reader.join(5)
        assert any("cannot reach the controller at" in x for x in seen), seen
        assert any("reconnected" in x for x in seen), seen
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


# --- 9: bad matrix keys, once each, with the other errors ---------------------------------------


def test_9_two_bad_matrix_keys_are_two_messages_beside_the_base_errors(lab: Lab) -> None:
    spec = lab.spec(
        "badkeys",
        **{
            "server.env": {"A": 1},
            "matrix": {"server.flag.--a": [1, 2, 3], "benchmark.inputlen": [1, 2]},
        },
    )
    result = lab.run("submit", str(spec), "--dry-run")
    assert result.returncode == 2
    err = result.stderr
    assert err.count("unknown key") == 2, err
    assert "matrix.server.flag.--a: server.flag: unknown key" in err
    assert "matrix.benchmark.inputlen: benchmark.inputlen: unknown key" in err
    assert "server.env.A: must be a string" in err


# --- 10: bench against something that is not HTTP -----------------------------------------------


def test_10_bench_against_a_non_http_port_exits_3_and_help_says_lengths_are_required(
    lab: Lab,
) -> None:
    result = lab.run("bench", "--url", f"http://{lab.agent.address}", "--model", "m",
                     "--concurrency", "1", "--input-len", "1", "--output-len", "1")  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "does not speak HTTP" in result.stderr and "Traceback" not in result.stderr
    helped = lab.run("bench", "--help").stdout
    assert re.search(r"--input-len I\s+prompt length in tokens, >= 1 \(required", helped)


# --- 11: the smaller ones -------------------------------------------------------------------------


def test_11_json_into_a_closed_pipe_is_silent(lab: Lab) -> None:
    proc = subprocess.Popen(
        [TUNELAB, "server", "ls", "--all", "--json"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=lab.env(),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -0` does
    assert proc.wait(30) == 141
    assert proc.stderr.read() == b""


def test_11_export_targets_into_a_missing_folder_names_it(lab: Lab) -> None:
    out = lab.root / "no-such-dir" / "agents.json"
    result = lab.run("hosts", "export-targets", "--out", str(out))
    assert result.returncode == 2
    assert f"folder {out.parent} does not exist" in result.stderr


def test_11_not_found_exits_4(lab: Lab) -> None:
    result = lab.run("show", "x-00000000")
    assert (result.returncode, result.stderr) == (4, "tunelab: no experiment 'x-00000000'\n")


def test_11_the_wrong_daemon_is_named(lab: Lab) -> None:
    result = lab.run("ls", "--controller", lab.agent.address)
    assert result.returncode == 3
    assert f"{lab.agent.address} is not a tunelab controller" in result.stderr


def test_11_a_host_without_port_gets_the_agent_port_everywhere(lab: Lab) -> None:
    dialed = lab.run("server", "ls", "--agent", "localhost", TUNELAB_AGENT="")
    assert "localhost:50051" in dialed.stderr or dialed.returncode == 0
    added = lab.run("hosts", "add", "bare", "localhost", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["address"] == "localhost:50051"
    lab.run("hosts", "rm", "bare")


def test_11_an_agent_that_is_down_is_not_blamed_on_the_controller(lab: Lab) -> None:
    lab.run("hosts", "add", "gone", DEAD)
    try:
        result = lab.run("audit", "gone")
    finally:
        lab.run("hosts", "rm", "gone")
    assert result.returncode == 3
    assert "is up, but the agent behind it" in result.stderr  # cannot be reached / did not answer


# A terminal's Ctrl-C finds SIGINT at its default. A suite started in the background by a shell
# without job control inherits SIGINT ignored, and Python then installs no KeyboardInterrupt, so
# the CLI under test would never see the interrupt (it exited 0 after its run, twice, in full
# runs started that way): the CLI is exec'd with SIGINT back at its default, as a terminal has it.
RESET_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)
SIGINT_AT_DEFAULT = [sys.executable, "-c", RESET_SIGINT]


def test_11_ctrl_c_on_wait_says_the_work_goes_on_and_wait_follows_it_again(lab: Lab) -> None:
    spec = lab.spec("ctrlc", **{"benchmark.requests": 24, "server.flags.--itl-ms": 20})
    proc = subprocess.Popen(
        [*SIGINT_AT_DEFAULT, TUNELAB, "submit", str(spec), "--wait"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=lab.env(),
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("x-") and " RUNNING " in line:  # the watch is open, the run started
            break
    else:
        pytest.fail(f"the watch ended before the run was RUNNING: {proc.communicate()}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    hint = re.search(r"the experiments go on\. Follow them again with: tunelab wait (g-\w+)", err)
    assert hint is not None, err
    again = lab.run("wait", hint.group(1))
    assert again.returncode == 0, again.stderr
    assert "SUCCEEDED" in again.stdout


def test_11_dry_run_needs_no_controller(lab: Lab) -> None:
    result = lab.run("submit", str(DEMO_SPEC), "--dry-run", TUNELAB_CONTROLLER=DEAD)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("valid: would queue 9 experiment(s):")


def test_11_show_prints_the_spec_and_rounded_figures(lab: Lab) -> None:
    shown = lab.run("show", "anywhere")
    assert shown.returncode == 0, shown.stderr
    assert "  server: {python} -P -m tunelab.bench.simulator" in shown.stdout
    assert "  benchmark: completions c=2, 4 requests per point" in shown.stdout
    assert not re.search(r"\d\.\d{4,}", shown.stdout), shown.stdout


def test_11_server_status_shows_log_lines_and_piped_logs_have_one_line_per_redraw(
    lab: Lab,
) -> None:
    port = str(free_port())
    started = lab.run(
        "server", "start", "--port", port, "--name", "redraws", "--wait", "--",
        "{python}", "-m", "tunelab.bench.simulator", "--port", port, "--startup-seconds", "0.5",
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr
        status = lab.run("server", "status", "redraws")
        assert "  | " in status.stdout and "Loading safetensors" in status.stdout
        logs = lab.run("server", "logs", "redraws").stdout
        lines = logs.splitlines()
        assert sum("Loading safetensors checkpoint shards" in x for x in lines) > 5
        assert max(len(x) for x in lines) < 200 and "\r" not in logs
    finally:
        lab.run("server", "stop", "redraws", "--grace", "2s")


def test_11_fix_script_refuses_json(lab: Lab) -> None:
    agent = str(Path(sys.executable).with_name("tunelab-agent"))
    root = REPO / "tests" / "fixtures" / "audit" / "h200" / "root"
    result = subprocess.run(
        [agent, "audit", "--root", str(root), "--json", "--fix-script"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "does not combine with --json" in result.stderr


def test_11_the_committed_h200_capture_replays_as_captured() -> None:
    fixture = REPO / "tests" / "fixtures" / "audit" / "h200"
    agent = str(Path(sys.executable).with_name("tunelab-agent"))
    result = subprocess.run(
        [agent, "audit", "--root", str(fixture / "root"),
         "--nvml-snapshot", str(fixture / "nvml.json")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    expected = _verdicts((fixture / "report.txt").read_text())
    got = _verdicts(result.stdout)
    # every check the capture ran gives what it gave on the host (checks added since may join)
    assert {check: got.get(check) for check in expected} == expected
    assert "FAIL" not in got.values()


def _verdicts(report: str) -> dict[str, str]:
    """``check id -> PASS/WARN/FAIL/SKIP/ERROR`` from the audit's text output."""
    out = {}
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASS", "WARN", "FAIL", "SKIP", "ERROR"):
            out[parts[1]] = parts[0]
    return out


def test_controller_views_show_the_servers_phase_and_progress_while_it_loads(lab: Lab) -> None:
    """Issue 24: through a model load `show`/`ls`/watch said `STARTING: accepted` while the agent
    knew the phase and the shard count."""
    flags = {"server.flags.--startup-seconds": 12, "server.flags.--shards": 20}
    submitted = lab.run("submit", str(lab.spec("slowload", **flags)), "--json")
    assert submitted.returncode == 0, submitted.stderr
    loading = re.compile(
        r"STARTING: server LOADING, loading weights: Loading safetensors checkpoint shards"
        r" \d+/20"
    )
    seen: dict[str, str] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:
        for view in ("ls", "show"):
            out = lab.run(view, *(["slowload"] if view == "show" else [])).stdout
            found = loading.search(out)
            if found:
                seen.setdefault(view, found.group(0))
        time.sleep(0.5)
    assert set(seen) == {"ls", "show"}, seen
    done = lab.run("wait", "slowload", timeout=120)
    assert done.returncode == 0 and "SUCCEEDED" in done.stdout, done.stdout + done.stderr


def test_a_bad_flags_failure_reason_has_no_argparse_padding(lab: Lab) -> None:
    spec = lab.spec("badflag", **{"server.flags.--itl-ms": "x"})
    result = lab.run("submit", str(spec), "--wait")
    assert result.returncode == 1
    line = ls_row(lab.run("ls").stdout, " badflag ")
    message = line.split("server FAILED:", 1)[1]
    assert message.count("invalid _non_negative value: 'x'") == 1, line
    assert "[--" not in message, line  # argparse's usage fragments are left out (issue 46)
    assert "   " not in message.strip(), line  # argparse's usage lines are indented ~40 spaces


def test_repeat_1_says_not_enough_repeats_once_per_change(lab: Lab) -> None:
    spec = lab.spec("once")
    doc = yaml.safe_load(spec.read_text())
    doc["ablation"] = [{"server.flags.--itl-ms": 5}, {"server.flags.--tag": "no-op"}]
    doc["repeat"] = 1
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert lab.run("submit", str(spec), "--wait").returncode == 0
    compared = lab.run("compare", "once")
    assert compared.returncode == 0, compared.stderr
    text = " ".join(compared.stdout.split())
    for change in ("--itl-ms=5", "--tag=no-op"):
        assert (
            f"effect of {change} against the baseline: not enough repeats to estimate it: "
            "1 baseline and 1 variant launch(es), 3 of each are needed (repeat: 3 in the spec)"
        ) in text, compared.stdout
    assert compared.stdout.count("not enough repeats") <= 3, compared.stdout  # legend + 2


def test_show_prints_the_server_flags_in_the_specs_order(lab: Lab) -> None:
    spec = lab.spec("ordered")
    doc = yaml.safe_load(spec.read_text())
    flags = doc["server"]["flags"]
    doc["server"]["flags"] = {"--ttft-ms": 40, "--port": flags["--port"], "--model": "sim-7b",
                              "--itl-ms": 10, "--startup-seconds": 0.2}  # fmt: skip
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert lab.run("submit", str(spec), "--wait").returncode == 0
    shown = lab.run("show", "ordered")
    line = next(x for x in shown.stdout.splitlines() if x.startswith("  server: "))
    order = [a for a in line.split() if a.startswith("--")]
    assert order == ["--ttft-ms", "--port", "--model", "--itl-ms", "--startup-seconds"], line
    provenance = json.loads(lab.run("show", "ordered", "--json").stdout)["attempts"][-1]
    argv = [a for a in (provenance.get("provenance") or {}).get("argv", []) if a.startswith("--")]
    assert argv in ([], order), argv  # what the agent ran: the same order
