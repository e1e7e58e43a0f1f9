"""A real vLLM 0.32 (CPU) profiled by the agent, and its prefix cache reset between points.

One run: the agent adds --profiler-config (a vLLM argv it detects), profiles point 0's whole
window, resets the prefix cache before each point (two points on one server: the default, which
sets VLLM_SERVER_DEV_MODE=1), keeps the gzipped trace, and leaves the server up (keep_server)
so the reset is checked on vLLM's own counters: a repeated 300-token prompt hits the prefix
cache, and after /reset_prefix_cache the same prompt hits nothing. The fetched traces go
through the `tunelab profile --trace` command too, whose top op must be in vLLM's own
key_averages table with the same time and count. Prints the figures for the closing note:
trace size, the summary's top ops, throughput of the profiled point against the unprofiled one.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.engines.conftest import Agent, vllm_spec, watch
from tests.integration.test_agent_runs import wait_run
from tests.support.key_averages import table_rows
from tests.support.ports import free_port
from tunelab.analysis.profiles.summary import summarize
from tunelab.v1 import agent_pb2, run_pb2, server_pb2

R = run_pb2


def _hits(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    match = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    assert match, "no vllm:prefix_cache_hits_total sample"
    return float(match.group(1))


def _complete(port: int, prompt: str) -> None:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 2}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"}
    )
    urllib.request.urlopen(request, timeout=60).read()


def _post(port: int, path: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", b"", method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return int(response.status)


def _check_profile_command(folder: Path, top: str, table: dict[str, tuple[float, int]]) -> None:
    """`tunelab profile --trace FOLDER --json` on the real traces: the summary's keys, and a
    top op that is a real op (a namespaced one, not a step annotation) with vLLM's own count."""
    command = [sys.executable, "-m", "tunelab.cli", "profile", "--trace", str(folder), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert set(doc) == {
        "categories", "categories_basis", "cpu_ms", "devices", "events", "gpu_idle_share",
        "gpu_ms", "output_tokens", "steps", "streams", "top", "trace_files", "wall_ms",
    }  # fmt: skip
    assert doc["trace_files"] == sorted(p.name for p in folder.iterdir())
    assert doc["categories_basis"] == "cpu" and doc["gpu_ms"] == 0 and doc["cpu_ms"] > 0
    first = doc["top"][0]
    assert first["name"] == top  # the command and the in-process summary agree
    assert re.fullmatch(r"(aten|_C|vllm)::\w+", first["name"]), first  # an op, no annotation
    assert first["kind"] == "cpu" and first["self_ms"] > 0 and 0 < first["share"] < 1
    # the table prints 3 significant decimals in its own unit (ms, or s past 1 s)
    shown = table.get(first["name"])
    assert shown is not None, (first, table)
    assert shown[0] == pytest.approx(first["self_ms"], rel=1e-3, abs=0.001), (first, table)
    assert shown[1] == first["calls"], (first, table)
    print(f"tunelab profile --trace: top op {first['name']} {first['self_ms']:.1f} ms "
          f"x{first['calls']} ({first['category']}), {doc['events']} events")  # fmt: skip


def test_profiled_point_and_cache_reset_on_real_vllm(
    agent: Agent, venv: Path, tiny_model: Path, compile_cache: Path, tmp_path: Path
) -> None:
    port = free_port()
    server = vllm_spec(venv, tiny_model, port, compile_cache, "--enforce-eager")
    builtin = R.BuiltinBenchmark(
        model="tiny", concurrency=[2, 2], requests=8, input_len=32, output_len=32,
        profile=R.ProfileSpec(point=0),
    )  # fmt: skip
    spec = R.RunSpec(
        server=server, benchmark=R.BenchmarkSpec(builtin=builtin), max_duration_seconds=900,
        keep_server=True,
    )  # fmt: skip
    agent.stub.StartRun(agent_pb2.StartRunRequest(run_id="vp1", spec=spec), timeout=30)
    final = wait_run(agent.stub, "vp1", timeout=900)
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    try:
        argv = list(final.server.spec.argv)
        assert "--profiler-config" in argv
        assert final.server.spec.env["VLLM_SERVER_DEV_MODE"] == "1"
        result = json.loads(final.result_json)
        profiled, plain = result["points"]
        assert [p["cache_reset"]["ok"] for p in (profiled, plain)] == [True, True]
        profile = result["profile"]
        assert profile["window"]["ok"] is True, profile
        assert profile["traces"], profile["warnings"]
        assert all(".json" in t["name"] for t in profile["traces"])  # tables are other_files
        fetched = tmp_path / "traces"  # the traces alone: the folder `tunelab profile` reads
        fetched.mkdir()
        files = []
        for trace in profile["traces"]:
            chunks = agent.stub.FetchProfile(
                agent_pb2.FetchProfileRequest(run_id="vp1", name=trace["name"]), timeout=120
            )
            path = fetched / trace["name"]
            path.write_bytes(b"".join(c.data for c in chunks))
            assert path.stat().st_size == trace["size_bytes"]
            files.append(path)
        save = os.environ.get("TUNELAB_PROFILE_SAVE")  # keep the real traces (fixtures, figures)
        if save:
            Path(save).mkdir(parents=True, exist_ok=True)
            for kept in (agent.proc.state_dir / "runs" / "vp1" / "traces").iterdir():
                shutil.copy(kept, save)
            (Path(save) / "result.json").write_text(final.result_json)
        summary = summarize(files, top=8, output_tokens=profile["window"]["output_tokens"])
        assert summary.cpu_ms > 0 and summary.top
        print(f"\ntraces: {[(t['name'], t['size_bytes']) for t in profile['traces']]}")
        print(f"wall {summary.wall_ms:.1f} ms, CPU op time {summary.cpu_ms:.1f} ms, steps "
              f"{summary.steps}")  # fmt: skip
        for t in summary.top:
            print(f"  {t.self_ms:10.3f} ms {t.calls:6d} {t.share:6.1%} {t.category:16} {t.name}")
        print(
            f"output tok/s profiled {profiled['output_throughput']:.1f}, unprofiled "
            f"{plain['output_throughput']:.1f} (overhead "
            f"{1 - profiled['output_throughput'] / plain['output_throughput']:+.1%})"
        )
        # vLLM's own key_averages table, written beside each trace (gzipped by the agent)
        tables = [p for p in profile["other_files"] if ".profiler_out.txt" in p["name"]]
        assert tables, profile["other_files"]
        table: dict[str, tuple[float, int]] = {}
        for other in tables:
            chunks = agent.stub.FetchProfile(
                agent_pb2.FetchProfileRequest(run_id="vp1", name=other["name"]), timeout=120
            )
            data = b"".join(c.data for c in chunks)
            text = gzip.decompress(data) if other["name"].endswith(".gz") else data
            table.update(table_rows(text.decode()))
        _check_profile_command(fetched, summary.top[0].name, table)

        # the reset, on vLLM's own counter: a repeated long prompt hits, after a reset it does not
        prompt = " ".join(f"w{i % 50}" for i in range(120))  # 128+ tokens: one full KV block
        _complete(port, prompt)
        before = _hits(port)
        _complete(port, prompt)
        warm = _hits(port)
        assert warm > before, "a repeated long prompt should hit the prefix cache"
        assert _post(port, "/reset_prefix_cache") == 200
        _complete(port, prompt)
        assert _hits(port) == warm, "after a reset the same prompt must not hit"
    finally:
        agent.stub.StopServer(agent_pb2.StopServerRequest(id=final.server_id), timeout=60)
        watch(agent.stub, final.server_id)
        assert (
            agent.stub.GetServer(
                agent_pb2.GetServerRequest(id=final.server_id), timeout=10
            ).server.state
            == server_pb2.SERVER_STATE_STOPPED
        )


def test_server_start_profile_and_server_profile_on_real_vllm(
    agent: Agent, venv: Path, tiny_model: Path, compile_cache: Path, tmp_path: Path
) -> None:
    """`tunelab server start --profile` + `tunelab server profile --requests N` (counted on
    vLLM's own vllm:request_success_total) through the CLI, while a client sends load."""
    port = free_port()
    spec = vllm_spec(venv, tiny_model, port, compile_cache, "--enforce-eager")
    env_flags = [f"--env={k}={v}" for k, v in spec.env.items()]

    def tunelab(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tunelab.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=600)

    began = time.monotonic()
    started = tunelab(
        "server", "start", "--agent", agent.proc.address, "--port", str(port), "--profile",
        "--startup-timeout", "5m", "--grace", "30s", "--wait", "--json", *env_flags,
        "--", *spec.argv,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    doc = json.loads(started.stdout)
    assert doc["state"] == "READY" and doc["profilable"] is True and doc["engine"] == "vllm"
    ready = time.monotonic()
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            _complete(port, "hello there")

    client = threading.Thread(target=load, daemon=True)
    client.start()
    try:
        out = tmp_path / "out"
        profiled = tunelab(
            "server", "profile", "--agent", agent.proc.address, doc["id"], "--requests", "4",
            "--out", str(out), "--json", "--top", "8",
        )  # fmt: skip
    finally:
        stop.set()
        client.join(120)
        agent.stub.StopServer(agent_pb2.StopServerRequest(id=doc["id"]), timeout=120)
    assert profiled.returncode == 0, profiled.stderr + profiled.stdout
    result = json.loads(profiled.stdout)
    account = result["server_profile"]
    assert account["ok"] is True and account["requests"] >= 4, account
    assert result["top"] and result["cpu_ms"] > 0
    saved = sorted((out / account["profile_id"]).iterdir())
    assert any(p.name.endswith(".json.gz") for p in saved)
    print(
        f"\nserver profile on vLLM: start {ready - began:.1f} s, profile "
        f"{time.monotonic() - ready:.1f} s (window {account['window_seconds']:.1f} s, "
        f"{account['requests']} requests), traces "
        f"{[(t['name'], t['size_bytes']) for t in account['traces']]}"
    )
