"""Integration: issue 24's smaller first-hour findings, each through the real console scripts
(``tunelab``, ``tunelab-agent``), asserting the message and the exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.agent_proc import AgentProcess

TUNELAB = str(Path(sys.executable).with_name("tunelab"))
AGENT = str(Path(sys.executable).with_name("tunelab-agent"))


def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def test_bare_tunelab_agent_prints_help_and_exits_0_without_rst_quotes() -> None:
    done = run(AGENT)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "audit" in done.stdout
    audit_help = run(AGENT, "audit", "--help")
    assert audit_help.returncode == 0
    for text in (done.stdout, audit_help.stdout):
        assert "``" not in text, text


def test_agent_audit_json_into_a_closed_pipe_is_silent() -> None:
    proc = subprocess.Popen([AGENT, "audit", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -0` does
    assert proc.wait(60) == 141
    assert b"Traceback" not in proc.stderr.read()


def test_bench_says_a_missing_flag_is_missing_and_names_flags_not_fields() -> None:
    base = [TUNELAB, "bench", "--url", "http://127.0.0.1:1", "--model", "m"]
    cases = [
        ([], "give --concurrency N[,N...] (closed loop) or --rate R[,R...] (open loop, "),
        (["--concurrency", "1", "--output-len", "8"], "--input-len is required"),
        (["--concurrency", "1", "--input-len", "8"], "--output-len is required"),
        (["--rate", "-1", "--input-len", "8", "--output-len", "8"], "--rate: must be a finite"),
    ]
    for extra, message in cases:
        done = run(*base, *extra)
        assert done.returncode == 2, (extra, done.stderr)
        assert message in done.stderr, (extra, done.stderr)
        assert "request_rate" not in done.stderr and "must be >= 1" not in done.stderr


def test_controller_db_in_an_uncreatable_folder_is_named_not_a_bug(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run(TUNELAB, "controller", "serve", "--listen", "127.0.0.1:0",
               "--db", str(blocker / "sub" / "tunelab.db"))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot create the database's folder {blocker}" in done.stderr, done.stderr
    assert "this is a bug" not in done.stderr


def test_db_postgresql_without_the_extra_names_the_install_command(tmp_path: Path) -> None:
    # a psycopg that cannot be imported, as on an install without the [postgresql] extra
    (tmp_path / "psycopg.py").write_text("raise ImportError(\"No module named 'psycopg'\")\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [TUNELAB, "controller", "serve", "--listen", "127.0.0.1:0",
         "--db", "postgresql://tunelab:secret@127.0.0.1:1/tunelab"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "pip install 'tunelab[postgresql]'" in done.stderr, done.stderr
    assert "this is a bug" not in done.stderr and "secret" not in done.stderr


def test_controller_at_a_metrics_port_is_named_as_plain_http(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    metrics = free_port()
    agent = AgentProcess(tmp_path / "agent", ["--metrics-listen", f"127.0.0.1:{metrics}"])
    agent.start()
    try:
        for flag, daemon in (("--controller", "controller"), ("--agent", "agent")):
            argv = ["ls"] if daemon == "controller" else ["server", "ls"]
            done = run(TUNELAB, *argv, flag, f"127.0.0.1:{metrics}")
            assert done.returncode == 3, done.stderr
            assert "answered, but not in gRPC (plain HTTP, such as a /metrics port)" in done.stderr
            assert f"not a tunelab {daemon}'s gRPC address" in done.stderr
            assert "Failed parsing HTTP/2" not in done.stderr
    finally:
        agent.terminate()


def test_server_logs_tail_counts_printed_lines_and_status_json_has_the_log_tail(
    agent: AgentProcess,
) -> None:
    from tests.support.ports import free_port

    env = {**os.environ, "TUNELAB_AGENT": agent.address}
    port = str(free_port())

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TUNELAB, *argv], capture_output=True, text=True, timeout=60,
                              env=env)  # fmt: skip

    started = cli(
        "server", "start", "--port", port, "--wait", "--json", "--", sys.executable, "-m",
        "tunelab.bench.simulator", "--port", port, "--model", "sim", "--startup-seconds", "1",
        "--shards", "40",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    server_id = json.loads(started.stdout)["id"]
    try:
        for n in (1, 3, 7):
            tail = cli("server", "logs", server_id, "--tail", str(n))
            assert tail.returncode == 0, tail.stderr
            assert len(tail.stdout.splitlines()) == n, tail.stdout  # was 87 for --tail 3
        last = cli("server", "logs", server_id, "--tail", "1").stdout.strip()
        text = cli("server", "status", server_id)
        shown = [line[4:] for line in text.stdout.splitlines() if line.startswith("  | ")]
        status = json.loads(cli("server", "status", server_id, "--json").stdout)
        assert status["log_tail"] == shown and shown and shown[-1] == last, (status, shown)
    finally:
        cli("server", "stop", server_id)


def test_a_capture_on_a_host_without_a_gpu_replays_as_the_readme_says(tmp_path: Path) -> None:
    """Issue 24: without a GPU the capture wrote no nvml.json, so the documented replay
    (``--root DIR/root --nvml-snapshot DIR/nvml.json``) failed."""
    from tunelab.agent.gpu import NoGpuBackend, capture_snapshot, open_backend

    # the snapshot of a host without NVML holds the reason, and replays as that host
    snap = tmp_path / "nvml.json"
    snap.write_text(json.dumps(capture_snapshot(NoGpuBackend("NVML Shared Library Not Found"))))
    replayed = open_backend(snap)
    assert not replayed.available()
    assert replayed.unavailable_reason() == "NVML Shared Library Not Found"
    if open_backend().available():
        return  # a GPU host: the capture below would be a GPU capture
    out = tmp_path / "capture"
    from tests.support.daemon_proc import REPO

    captured = run(sys.executable, str(REPO / "benchmarks" / "capture_host_tree.py"),
                   "--out", str(out), timeout=120)  # fmt: skip
    assert captured.returncode == 0, captured.stderr
    assert (out / "nvml.json").is_file()
    replay = run(AGENT, "audit", "--root", str(out / "root"), "--nvml-snapshot",
                 str(out / "nvml.json"), "--json", timeout=120)  # fmt: skip
    assert replay.returncode in (0, 1), replay.stderr  # the audit ran (1: a check FAILed)
    live = json.loads((out / "report.json").read_text())
    again = json.loads(replay.stdout)
    gpu_checks = {c["id"]: c["status"] for c in live["checks"] if c["id"].startswith("gpu.")}
    assert gpu_checks and gpu_checks == {
        c["id"]: c["status"] for c in again["checks"] if c["id"].startswith("gpu.")
    }
