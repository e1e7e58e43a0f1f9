"""``tunelab server start --profile`` and ``tunelab server profile``: a real agent on loopback,
the real CLI as a process, and the simulator as the server. As a generic server it writes its
trace into ``TUNELAB_PROFILE_DIR`` (set by the agent) from ``/start_profile``/``/stop_profile``;
as engine "vllm" it takes the ``--profiler-config`` the agent adds, as a real vLLM does."""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.integration.test_server_cli import tunelab
from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tunelab.v1 import agent_pb2, run_pb2, server_pb2

SIM = [sys.executable, "-m", "tunelab.bench.simulator", "--model", "sim", "--itl-ms", "2"]
GENERIC_URLS = ["--start-url", "/start_profile", "--stop-url", "/stop_profile"]


def start(
    agent: AgentProcess, *flags: str, sim: tuple[str, ...] = ()
) -> tuple[dict[str, Any], int]:
    """A simulator started through the CLI (``--wait --json``); its JSON and port."""
    port = free_port()
    done = tunelab(
        "server", "start", "--agent", agent.address, "--port", str(port), "--grace", "5s",
        "--ready-model", "sim", "--wait", "--json", *flags,
        "--", *SIM, "--port", str(port), *sim,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["state"] == "READY", doc
    return doc, port


def sim_stats(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/stats", timeout=10) as resp:
        stats: dict[str, object] = json.loads(resp.read())
    return stats


def fetch(agent: AgentProcess, *, server_id: str = "", run_id: str = "", name: str = "") -> bytes:
    request = agent_pb2.FetchProfileRequest(server_id=server_id, run_id=run_id, name=name)
    chunks = agent.stub().FetchProfile(request, timeout=30)
    return b"".join(c.data for c in chunks)


def listing(agent: AgentProcess, server_id: str) -> list[dict[str, Any]]:
    path = agent.state_dir / "servers" / server_id / "profiles.json"
    profiles: list[dict[str, Any]] = json.loads(path.read_text())["profiles"]
    return profiles


def test_a_generic_server_profiled_through_the_cli(agent: AgentProcess, tmp_path: Path) -> None:
    doc, port = start(agent, "--profile", "--engine", "generic")
    server_id = doc["id"]
    trace_dir = agent.state_dir / "servers" / server_id / "traces"
    assert doc["profilable"] is True and doc["profiling"] is False
    assert doc["profile_dir"] == str(trace_dir)

    out = tmp_path / "out"
    done = tunelab(
        "server", "profile", "--agent", agent.address, server_id, "--window", "0.3s",
        *GENERIC_URLS, "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    profiled = json.loads(done.stdout)
    account = profiled["server_profile"]
    assert account["ok"] is True and account["profile_id"] == "p1", account
    assert account["warnings"] == []
    (trace,) = account["traces"]
    saved = out / "p1" / trace["name"]
    assert saved.read_bytes() == (trace_dir / trace["name"]).read_bytes()
    assert json.loads(gzip.decompress(saved.read_bytes()))["traceEvents"]  # opens as written
    assert {t["name"] for t in profiled["top"]} >= {"nvjet_sim_gemm", "flash_fwd_sim_kernel"}

    # the same keys as `tunelab profile --json` for the same trace (plus server_profile)
    by_hand = tunelab("profile", "--trace", str(saved), "--json")
    assert by_hand.returncode == 0, by_hand.stderr
    assert set(profiled) - {"server_profile"} == set(json.loads(by_hand.stdout))

    # a second profile, printed: the summary `tunelab profile` prints; p1's trace stays p1's
    text = tunelab(
        "server", "profile", "--agent", agent.address, server_id, "--window", "0.2s",
        *GENERIC_URLS,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert f"{server_id} p2: window" in text.stdout
    assert "by category" in text.stdout and "nvjet_sim_gemm" in text.stdout
    first, second = listing(agent, server_id)
    assert first["traces"] == [trace] and len(second["traces"]) == 1
    assert second["traces"] != first["traces"]

    stats = sim_stats(port)
    assert stats["profiling"] is False and stats["starts"] == stats["stops"] == 2
    status = tunelab("server", "status", "--agent", agent.address, server_id, "--json")
    assert json.loads(status.stdout)["profiling"] is False
    # the traces outlive the server: fetched after it stopped
    assert tunelab("server", "stop", "--agent", agent.address, server_id).returncode == 0
    assert fetch(agent, server_id=server_id, name=trace["name"]) == saved.read_bytes()


def test_a_server_started_without_profile_is_refused(agent: AgentProcess) -> None:
    doc, _ = start(agent)
    assert doc["profilable"] is False and doc["profile_dir"] is None
    done = tunelab("server", "profile", "--agent", agent.address, doc["id"], "--window", "1s")
    assert done.returncode == 1, done.stdout
    assert "without --profile" in done.stderr and "restart it with" in done.stderr


def _open_profile(
    agent: AgentProcess, server_id: str, seconds: float
) -> Iterator[agent_pb2.ProfileServerResponse]:
    request = agent_pb2.ProfileServerRequest(
        id=server_id, window_seconds=seconds, start_url="/start_profile", stop_url="/stop_profile"
    )
    return agent.stub().ProfileServer(request, timeout=120)


def test_a_second_profile_is_refused_and_a_caller_gone_ends_the_window(
    agent: AgentProcess,
) -> None:
    doc, port = start(agent, "--profile", "--engine", "generic")
    server_id = doc["id"]
    stream = _open_profile(agent, server_id, 300)
    first = next(stream)  # the start was answered: the window is open
    assert first.done is False and first.profile_id == "p1"
    assert sim_stats(port)["profiling"] is True
    status = tunelab("server", "status", "--agent", agent.address, server_id, "--json")
    assert json.loads(status.stdout)["profiling"] is True
    second = tunelab(
        "server", "profile", "--agent", agent.address, server_id, "--window", "1s", *GENERIC_URLS
    )  # fmt: skip
    assert second.returncode == 1
    assert (
        "being profiled already (p1" in second.stderr and "one profile at a time" in second.stderr
    )
    stream.cancel()  # type: ignore[attr-defined]  # the caller goes away mid-window
    server = agent.stub().GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server
    deadline_checks = 0
    while server.profiling:  # the agent sends the stop and keeps the trace on its own
        threading.Event().wait(0.1)
        deadline_checks += 1
        assert deadline_checks < 600, "the profile never ended"
        server = agent.stub().GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server
    stats = sim_stats(port)
    assert stats["profiling"] is False and stats["stops"] == 1
    (entry,) = listing(agent, server_id)
    assert any("ended early" in str(w) for w in entry["warnings"])
    assert len(entry["traces"]) == 1


def test_a_stop_that_times_out_is_a_warning_and_the_server_is_not_left_profiling(
    agent: AgentProcess,
) -> None:
    doc, port = start(agent, "--profile", "--engine", "generic", sim=("--profile-stop-delay", "10"))
    done = tunelab(
        "server", "profile", "--agent", agent.address, doc["id"], "--window", "0.1s",
        "--stop-timeout", "0.5s", *GENERIC_URLS, "--json",
    )  # fmt: skip
    account = json.loads(done.stdout)["server_profile"]
    assert account["ok"] is False and done.returncode in (0, 1)  # never an error status
    (stop_warning,) = [w for w in account["warnings"] if "stop failed" in w]
    assert "no answer from" in stop_warning and "retried" in stop_warning
    assert sim_stats(port)["profiling"] is False  # the profiler was told to stop
    status = tunelab("server", "status", "--agent", agent.address, doc["id"], "--json")
    assert json.loads(status.stdout)["profiling"] is False


def test_trace_names_are_confined_and_bad_fields_are_named(agent: AgentProcess) -> None:
    doc, _ = start(agent, "--profile", "--engine", "generic")
    server_id = doc["id"]
    done = tunelab(
        "server", "profile", "--agent", agent.address, server_id, "--window", "0.1s",
        *GENERIC_URLS, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (trace,) = json.loads(done.stdout)["server_profile"]["traces"]
    trace_dir = agent.state_dir / "servers" / server_id / "traces"
    os.symlink("/etc/hostname", trace_dir / "sneaky.json.gz")
    (trace_dir / "planted.json.gz").write_bytes(b"not listed")
    names = ("../state.json", "../profiles.json", "sneaky.json.gz", "planted.json.gz")
    for name in (*names, "/etc/hostname", "", f"../traces/{trace['name']}"):
        with pytest.raises(grpc.RpcError) as caught:
            fetch(agent, server_id=server_id, name=name)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND, name
    assert fetch(agent, server_id=server_id, name=trace["name"])  # the listed one is fetched
    for both in ({"server_id": server_id, "run_id": "r"}, {}):
        with pytest.raises(grpc.RpcError) as caught:
            fetch(agent, name=trace["name"], **both)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "exactly one of run_id and server_id" in str(caught.value.details())

    stub = agent.stub()
    bad: list[tuple[dict[str, object], str]] = [
        ({"window_seconds": 601}, "window_seconds"),
        ({}, "window_seconds"),
        ({"window_seconds": 1, "activities": ["tpu"]}, "activities[0]"),
        ({"window_seconds": 1, "stop_timeout_seconds": -1}, "stop_timeout_seconds"),
        ({"window_seconds": 1, "start_url": "start"}, "start_url"),
        ({"window_requests": 3}, "window_requests"),  # generic: no request counter
        ({"window_seconds": 1, "start_url": "/start_profile"}, "stop_url"),
    ]
    for fields, named in bad:
        request = agent_pb2.ProfileServerRequest(id=server_id, **fields)  # type: ignore[arg-type]
        if "start_url" not in fields and named != "stop_url":
            request.start_url, request.stop_url = "/start_profile", "/stop_profile"
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.ProfileServer(request, timeout=30))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
        assert str(caught.value.details()).startswith(named + ":"), caught.value.details()
    # a run's server cannot ask for it: a run profiles through benchmark.builtin.profile
    run = run_pb2.RunSpec(
        server=server_pb2.ServerSpec(argv=SIM, port=0, profile=True),
        benchmark=run_pb2.BenchmarkSpec(builtin=run_pb2.BuiltinBenchmark(model="sim")),
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub.StartRun(agent_pb2.StartRunRequest(run_id="r1", spec=run), timeout=10)
    assert str(caught.value.details()).startswith("spec.server.profile:")


def _load(port: int, stop: threading.Event) -> None:
    body = json.dumps({"model": "sim", "prompt": "hello", "max_tokens": 4}).encode()
    while not stop.is_set():
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            resp.read()


def test_a_vllm_server_gets_its_profiler_config_and_a_window_counted_in_requests(
    agent: AgentProcess,
) -> None:
    """Engine vllm: the agent adds --profiler-config (the simulator has the endpoints only
    then) and counts the window in requests from vllm:request_success_total."""
    doc, port = start(agent, "--profile", "--engine", "vllm")
    server = agent.stub().GetServer(agent_pb2.GetServerRequest(id=doc["id"]), timeout=10).server
    assert "--profiler-config" not in server.spec.argv  # the spec is the caller's, as given
    cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
    config = json.loads(cmdline[cmdline.index(b"--profiler-config") + 1])
    assert config["torch_profiler_dir"] == doc["profile_dir"]
    stop = threading.Event()
    load = threading.Thread(target=_load, args=(port, stop), daemon=True)
    load.start()
    try:
        done = tunelab(
            "server", "profile", "--agent", agent.address, doc["id"], "--requests", "5", "--json"
        )  # fmt: skip
    finally:
        stop.set()
        load.join(30)
    assert done.returncode == 0, done.stderr
    account = json.loads(done.stdout)["server_profile"]
    assert account["ok"] is True and account["requests"] >= 5, account
    assert account["warnings"] == []


def test_an_agent_killed_in_the_window_stops_the_profiler_at_its_restart(
    agent: AgentProcess,
) -> None:
    """Intent before effect: the window's stop is on disk before its start is sent, so the next
    agent sends it and lists the trace (the server itself outlives the agent)."""
    doc, port = start(agent, "--profile", "--engine", "generic")
    server_id = doc["id"]
    stream = _open_profile(agent, server_id, 300)
    assert next(stream).done is False
    assert sim_stats(port)["profiling"] is True
    agent.kill9()
    stream.cancel()  # type: ignore[attr-defined]
    assert sim_stats(port)["profiling"] is True  # nobody stopped it
    agent.restart()
    checks = 0
    while not (agent.state_dir / "servers" / server_id / "profiles.json").exists():
        threading.Event().wait(0.1)
        checks += 1
        assert checks < 600, agent.log()[-20000:]
    (entry,) = listing(agent, server_id)
    assert sim_stats(port)["profiling"] is False
    assert any("agent restarted during the window" in str(w) for w in entry["warnings"])
    (trace,) = entry["traces"]
    assert fetch(agent, server_id=server_id, name=str(trace["name"]))
    assert not (agent.state_dir / "servers" / server_id / "profile-open.json").exists()
