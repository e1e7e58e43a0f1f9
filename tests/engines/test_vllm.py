"""A real vLLM 0.32 (CPU) under the real agent: phases, READY latency, probe etiquette,
/metrics/engines, the load generator beside `vllm bench serve`, failure reasons, a clean stop.

Runs in file order: the session's server is started first and stopped by the last test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from tests.engines.conftest import CLIENT_CPU, Agent, Started, vllm_spec, watch
from tests.support.ports import free_port
from tunelab.v1 import agent_pb2, server_pb2

S = server_pb2
# vLLM fields we cannot fill with the same meaning (README, "vLLM mapping"):
NOT_OURS = {"generated_texts"}  # we never keep response text


def test_start_reports_each_phase_with_progress_and_ready_promptly(vllm_server: Started) -> None:
    server = vllm_server.server
    assert server.engine == "vllm", "detected from the argv"
    phases = [p.phase for p in server.phases]
    assert phases[0] == S.SERVER_PHASE_IMPORTING and phases[-1] == S.SERVER_PHASE_READY
    for phase in (S.SERVER_PHASE_LOADING_WEIGHTS, S.SERVER_PHASE_COMPILING):
        assert phase in phases, [S.ServerPhase.Name(p) for p in phases]
    durations = {S.ServerPhase.Name(p.phase): round(p.seconds, 2) for p in server.phases}
    print(f"\nphases: {durations}")
    bars = [u.progress for u in vllm_server.updates if u.HasField("progress")]
    assert bars and bars[-1].phase == S.SERVER_PHASE_LOADING_WEIGHTS
    assert bars[-1].done == bars[-1].total >= 2  # the model has several shards
    # READY within 100 ms of the engine being ready (its port opens only then)
    assert vllm_server.port_open_at > 0
    latency = server.ready_at - vllm_server.port_open_at
    print(
        f"READY {latency * 1000:.1f} ms after the port opened; HTTP probes {server.probe_requests}"
    )
    assert latency < 0.1
    assert 1 <= server.probe_requests <= 3


def test_probe_leaves_the_log_readable(agent: Agent, vllm_server: Started) -> None:
    log = Path(vllm_server.server.log_path).read_text(errors="replace")
    health = len(re.findall(r'"GET /health HTTP/1\.1"', log))
    print(f"\n/health access-log lines: {health}")
    assert health <= vllm_server.server.probe_requests


def test_metrics_engines_relays_vllm_samples(agent: Agent, vllm_server: Started) -> None:
    url = f"http://127.0.0.1:{agent.metrics_port}/metrics/engines"
    samples: list[str] = []
    for _ in range(3):  # the relay's per-scrape timeout can be short on a loaded core
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
        samples = [line for line in text.splitlines() if line.startswith("vllm")]
        if samples:
            break
        time.sleep(1)
    name = vllm_server.server.spec.name or vllm_server.server.id
    print(f"\n/metrics/engines: {len(samples)} vllm samples")
    assert len(samples) > 100, text[:800]
    assert all(f'server="{name}"' in line for line in samples)


def _server_ttft(port: int) -> tuple[float, float]:
    """(sum, count) of vLLM's own TTFT histogram: the server-side reference."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:time_to_first_token_seconds_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def _mean_server_ttft_ms(before: tuple[float, float], after: tuple[float, float]) -> float:
    return (after[0] - before[0]) / (after[1] - before[1]) * 1000.0


def test_bench_beside_vllm_bench_serve(
    venv: Path, tiny_model: Path, vllm_server: Started, tmp_path: Path
) -> None:
    port = vllm_server.spec.port
    url = f"http://127.0.0.1:{port}"
    model_dir = str(tiny_model)
    n, isl, osl = 16, 32, 32
    pin = ["taskset", "-c", CLIENT_CPU]

    before = _server_ttft(port)
    ours = tmp_path / "tunelab.json"
    argv = [sys.executable, "-P", "-m", "tunelab.cli.main", "bench", "--url", url]
    argv += ["--tokenizer", model_dir, "--input-len", str(isl), "--output-len", str(osl)]
    argv += ["--concurrency", "1", "--requests", str(n), "--save-detailed", "--out", str(ours)]
    subprocess.run([*pin, *argv], check=True, timeout=300, stdout=subprocess.DEVNULL)
    middle = _server_ttft(port)
    theirs_dir = tmp_path / "vllm"
    vargv = [str(venv / "bin" / "vllm"), "bench", "serve", "--backend", "openai"]
    vargv += ["--base-url", url, "--model", "tiny", "--tokenizer", model_dir]
    vargv += ["--dataset-name", "random", "--random-input-len", str(isl)]
    vargv += ["--random-output-len", str(osl), "--num-prompts", str(n), "--max-concurrency", "1"]
    vargv += ["--ignore-eos", "--temperature", "0", "--save-result", "--save-detailed"]
    vargv += ["--result-dir", str(theirs_dir), "--result-filename", "vllm.json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([*pin, *vargv], check=True, timeout=300, env=env, stdout=subprocess.DEVNULL)
    after = _server_ttft(port)

    point = json.loads(ours.read_text())["points"][0]
    vllm_result = json.loads((theirs_dir / "vllm.json").read_text())
    missing = set(vllm_result) - set(point) - NOT_OURS
    assert not missing, f"vllm bench serve fields missing from ours: {sorted(missing)}"
    assert point["completed"] == vllm_result["completed"] == n
    assert point["model_id"] == "tiny", "--model defaults to the first id of /v1/models"
    # --tokenizer: prompts of exactly isl tokens, the BOS the server adds included (issue 37)
    assert point["min_input_len_requested"] == point["max_input_len_requested"] == isl
    assert point["min_input_tokens"] == point["max_input_tokens"] == isl
    assert point["total_output_tokens"] == vllm_result["total_output_tokens"] == n * osl

    server_ours = _mean_server_ttft_ms(before, middle)
    server_theirs = _mean_server_ttft_ms(middle, after)
    err_ours = point["mean_ttft_ms"] - server_ours
    err_theirs = vllm_result["mean_ttft_ms"] - server_theirs
    ratio = err_theirs / err_ours if err_ours > 0 else float("inf")
    print(
        f"\nTTFT mean ms: tunelab {point['mean_ttft_ms']:.2f} (server {server_ours:.2f}, "
        f"error {err_ours:+.2f}); vllm bench serve {vllm_result['mean_ttft_ms']:.2f} "
        f"(server {server_theirs:.2f}, error {err_theirs:+.2f}); error ratio vllm/tunelab "
        f"{ratio:.1f}x"
    )
    print(
        f"TPOT mean ms: tunelab {point['mean_tpot_ms']:.3f}, vllm {vllm_result['mean_tpot_ms']:.3f}"
    )
    assert point["mean_ttft_ms"] > 0 and vllm_result["mean_ttft_ms"] > 0


def test_the_same_vllm_bench_serve_line_runs_on_both_tools(
    venv: Path, tiny_model: Path, vllm_server: Started, tmp_path: Path
) -> None:
    """Issue 26: one `vllm bench serve` argument line, unchanged, run by vLLM and by
    `tunelab bench`; both saved results side by side."""
    port = vllm_server.spec.port
    pin = ["taskset", "-c", CLIENT_CPU]
    line = ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny"]
    line += ["--tokenizer", str(tiny_model), "--dataset-name", "random"]
    line += ["--random-input-len", "32", "--random-output-len", "16", "--num-prompts", "16"]
    line += ["--max-concurrency", "4", "--ignore-eos", "--temperature", "0", "--seed", "3"]
    line += ["--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,99"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    results = {}
    for tool, head in (
        ("vllm", [str(venv / "bin" / "vllm"), "bench", "serve"]),
        ("tunelab", [sys.executable, "-P", "-m", "tunelab.cli.main", "bench"]),
    ):
        save = ["--save-result", "--result-dir", str(tmp_path), "--result-filename", f"{tool}.json"]
        argv = [*pin, *head, *line, *save]
        subprocess.run(argv, check=True, timeout=300, env=env, stdout=subprocess.DEVNULL)
        results[tool] = json.loads((tmp_path / f"{tool}.json").read_text())
    theirs, ours = results["vllm"], results["tunelab"]
    keys = ("completed", "total_output_tokens", "max_concurrency", "output_throughput",
            "mean_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
            "p99_e2el_ms")  # fmt: skip
    print("\n| field | vllm bench serve | tunelab bench |\n|---|---:|---:|")
    for key in keys:
        print(f"| {key} | {theirs.get(key)} | {ours.get(key)} |")
    assert ours["completed"] == theirs["completed"] == 16
    assert ours["total_output_tokens"] == theirs["total_output_tokens"] == 16 * 16
    assert ours["max_concurrency"] == theirs["max_concurrency"] == 4
    assert "p50_ttft_ms" in ours and "p99_e2el_ms" in ours


def _prompt_tokens_total(port: int) -> float:
    """vLLM's own count of prompt tokens it has taken in (``vllm:prompt_tokens_total``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:prompt_tokens_total")
    )


def test_random_prompts_reach_vllm_at_the_length_vllm_gives_them(
    venv: Path, tiny_model: Path, vllm_server: Started, tmp_path: Path
) -> None:
    """Issue 37 item 4: the same random line by both tools; vLLM's random dataset leaves room
    for the BOS its tokenizer adds, and so does ours: vLLM's own prompt-token counter grows by
    n x 32 for ours exactly (it was n x 33), and by about that for vLLM's (its decode and
    re-encode misses by a token here and there: 258 for 256 on the first run)."""
    port = vllm_server.spec.port
    pin = ["taskset", "-c", CLIENT_CPU]
    n, isl = 8, 32
    line = ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny"]
    line += ["--tokenizer", str(tiny_model), "--dataset-name", "random"]
    line += ["--random-input-len", str(isl), "--random-output-len", "4", "--num-prompts", str(n)]
    line += ["--max-concurrency", "4", "--ignore-eos", "--temperature", "0"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    counted = {}
    for tool, head in (
        ("vllm", [str(venv / "bin" / "vllm"), "bench", "serve"]),
        ("tunelab", [sys.executable, "-P", "-m", "tunelab.cli.main", "bench"]),
    ):
        save = ["--save-result", "--result-dir", str(tmp_path), "--result-filename", f"{tool}.json"]
        before = _prompt_tokens_total(port)
        subprocess.run(
            [*pin, *head, *line, *save], check=True, timeout=300, env=env, stdout=subprocess.DEVNULL
        )
        counted[tool] = _prompt_tokens_total(port) - before
    print(
        f"\nvLLM's prompt-token counter: vllm bench serve +{counted['vllm']:.0f}, "
        f"tunelab bench +{counted['tunelab']:.0f} ({n} x {isl} = {n * isl})"
    )
    assert counted["tunelab"] == n * isl
    assert abs(counted["vllm"] - n * isl) < n / 2  # nearer n x 32 than n x 33 by far


def test_a_run_with_the_served_models_tokenizer_has_exact_lengths(
    agent: Agent, vllm_server: Started
) -> None:
    """Issue 35 item 6: ``benchmark.tokenizer: model`` on a run against the session's server
    (vllm serve <the tiny model's folder>): the agent loads that folder's tokenizer.json, and
    every prompt reaches vLLM at the length drawn for it (range ratio 0.3), BOS included."""
    from tests.integration.test_agent_runs import wait_run
    from tunelab.v1 import run_pb2 as R

    builtin = R.BuiltinBenchmark(
        model="tiny", concurrency=[2], requests=12, input_len=40, output_len=4, range_ratio=0.3,
        tokenizer="model",
    )  # fmt: skip
    spec = R.RunSpec(
        server_id=vllm_server.server.id, benchmark=R.BenchmarkSpec(builtin=builtin),
        max_duration_seconds=300,
    )  # fmt: skip
    agent.stub.StartRun(agent_pb2.StartRunRequest(run_id="tok1", spec=spec), timeout=60)
    final = wait_run(agent.stub, "tok1", timeout=300)
    assert final.state == R.RUN_STATE_SUCCEEDED, final.message
    result = json.loads(final.result_json)
    point = result["points"][0]
    assert point["completed"] == 12
    assert result["dataset"]["lengths_exact"] is True
    assert result["dataset"]["special_tokens"] == 1  # the tiny model's BOS
    # vLLM's usage.prompt_tokens, request by request, is the length asked for
    assert point["min_input_tokens"] == point["min_input_len_requested"]
    assert point["max_input_tokens"] == point["max_input_len_requested"]
    assert point["mean_input_tokens"] == point["mean_input_len_requested"]
    assert point["min_input_tokens"] < point["max_input_tokens"]
    assert not any("approximate" in w for w in result["warnings"])


def _prefix_cache(port: int) -> tuple[float, float]:
    """(hits, queries) of vLLM's prefix cache counters, in tokens."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    hits = queries = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


def test_shared_prefix_hits_vllms_prefix_cache_where_random_does_not(
    tiny_model: Path, vllm_server: Started, tmp_path: Path
) -> None:
    """Issue 26: the same lengths, 4 shared 256-token prefixes against random prompts; vLLM's
    own prefix-cache counters over each run (prefix caching is on by default in vLLM V1)."""
    port = vllm_server.spec.port
    url = f"http://127.0.0.1:{port}"
    pin = ["taskset", "-c", CLIENT_CPU]
    common = [sys.executable, "-P", "-m", "tunelab.cli.main", "bench", "--url", url]
    common += ["--tokenizer", str(tiny_model), "--concurrency", "4", "--requests", "32"]
    common += ["--output-len", "8"]
    shapes = {
        "shared-prefix": ["--dataset", "shared-prefix", "--prefix-len", "256",
                          "--prefix-groups", "4", "--input-len", "64"],
        "random": ["--dataset", "random", "--input-len", "320", "--seed", "9"],
    }  # fmt: skip
    figures = {}
    for name, extra in shapes.items():
        out = tmp_path / f"{name}.json"
        before = _prefix_cache(port)
        argv = [*pin, *common, *extra, "--out", str(out)]
        subprocess.run(argv, check=True, timeout=300, stdout=subprocess.DEVNULL)
        after = _prefix_cache(port)
        hits, queries = after[0] - before[0], after[1] - before[1]
        point = json.loads(out.read_text())["points"][0]
        figures[name] = (hits, queries, point["median_ttft_ms"], point)
    for name, (hits, queries, ttft, _) in figures.items():
        print(f"\n{name}: prefix cache hits {hits:.0f} / queries {queries:.0f} tokens "
              f"({hits / queries if queries else 0:.1%}), TTFT p50 {ttft:.1f} ms")  # fmt: skip
    shared, plain = figures["shared-prefix"], figures["random"]
    assert shared[1] > 0 and plain[1] > 0
    assert shared[0] / shared[1] > 0.5  # 256 of 320 tokens shared after each group's first
    assert plain[0] / plain[1] < 0.1
    assert sorted(shared[3]["by_prefix_group"]) == ["0", "1", "2", "3"]


def test_custom_prompts_reach_vllm_in_its_chat_template_as_vllm_bench_serve_sends_them(
    venv: Path, tiny_model: Path, vllm_server: Started, tmp_path: Path
) -> None:
    """Issue 37.4: ``--dataset-name custom`` wraps each prompt in the served model's chat
    template (vLLM's CustomDataset), or not with ``--skip-chat-template``; the same line run
    by both tools feeds vLLM the same prompt tokens either way (its own counter)."""
    port = vllm_server.spec.port
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"question {i}: tell me about the number {i}"}) + "\n"
            for i in range(6)
        )
    )
    pin = ["taskset", "-c", CLIENT_CPU]
    line = ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny"]
    line += ["--tokenizer", str(tiny_model), "--dataset-name", "custom", "--dataset-path"]
    line += [str(rows), "--num-prompts", "6", "--max-concurrency", "2", "--custom-output-len"]
    line += ["4", "--ignore-eos", "--temperature", "0", "--seed", "3"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    taken: dict[tuple[str, bool], float] = {}
    for skip in (False, True):
        for tool, head in (
            ("vllm", [str(venv / "bin" / "vllm"), "bench", "serve"]),
            ("tunelab", [sys.executable, "-P", "-m", "tunelab.cli.main", "bench"]),
        ):
            before = _prompt_tokens_total(port)
            more = ["--skip-chat-template"] if skip else []
            subprocess.run([*pin, *head, *line, *more], check=True, timeout=300, env=env,
                           stdout=subprocess.DEVNULL)  # fmt: skip
            taken[tool, skip] = _prompt_tokens_total(port) - before
    print(f"\nprompt tokens vLLM took in: {taken}")
    assert taken["tunelab", False] == taken["vllm", False]
    assert taken["tunelab", True] == taken["vllm", True]
    assert taken["vllm", False] > taken["vllm", True]  # the template's tokens


def test_bad_flag_and_missing_model_fail_with_their_reason(
    agent: Agent, venv: Path, tiny_model: Path, compile_cache: Path, tmp_path: Path
) -> None:
    cases = [
        (vllm_spec(venv, tiny_model, free_port(), compile_cache, "--max-num-seqs", "-5"),
         S.FAILURE_REASON_BAD_ARGUMENT),
        (vllm_spec(venv, tmp_path / "no-such-model", free_port(), compile_cache),
         S.FAILURE_REASON_MODEL_NOT_FOUND),
    ]  # fmt: skip
    started = [
        agent.stub.StartServer(agent_pb2.StartServerRequest(spec=spec), timeout=30).server.id
        for spec, _ in cases
    ]
    for server_id, (_, reason) in zip(started, cases, strict=True):
        final = watch(agent.stub, server_id)[-1]
        assert final.state == S.SERVER_STATE_FAILED
        assert final.failure_reason == reason, (final.message, list(final.log_tail)[-5:])
        print(f"\n{S.FailureReason.Name(reason)}: {final.failure_line}")


def _tree(server: server_pb2.Server) -> list[psutil.Process]:
    out = []
    for pid in {server.pid, *(d.pid for d in server.descendants)}:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return out


def _held_files(procs: list[psutil.Process]) -> set[str]:
    """/dev/shm files mapped or open, and unix socket files bound, by these processes."""
    held: set[str] = set()
    inodes: set[str] = set()
    for proc in procs:
        try:
            for m in proc.memory_maps(grouped=True):
                if m.path.startswith("/dev/shm/"):
                    held.add(m.path)
            for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    held.add(target)
                elif target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (psutil.Error, OSError):
            continue
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) == 8 and parts[6] in inodes and parts[7].startswith("/"):
            held.add(parts[7])
    return held


# The session's server is stopped here: every test that uses it comes above.
def test_stop_leaves_no_process_and_no_file(agent: Agent, vllm_server: Started) -> None:
    server_id = vllm_server.server.id
    current = agent.stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server
    procs = _tree(current)
    held = _held_files(procs)
    print(f"\nprocesses {len(procs)}, files held before stop: {sorted(held)}")
    t0 = time.monotonic()
    agent.stub.StopServer(agent_pb2.StopServerRequest(id=server_id), timeout=60)
    final = watch(agent.stub, server_id)[-1]
    while final.state == S.SERVER_STATE_STOPPING:
        time.sleep(0.2)
        final = agent.stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server
    print(f"stopped in {time.monotonic() - t0:.2f} s: {final.message}")
    assert final.state == S.SERVER_STATE_STOPPED, final.message
    # a zombie holds nothing but its exit status; reaping is its new parent's job
    alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive
    left = sorted(p for p in held if Path(p).exists())
    assert not left, f"left behind: {left}"
    print(f"removed by the agent: {list(final.leftovers_removed)}")


def test_stop_while_compiling_leaves_no_shared_memory(
    agent: Agent, venv: Path, tiny_model: Path, compile_cache: Path, tmp_path: Path
) -> None:
    """torch.compile ignores SIGTERM: the ladder ends in SIGKILL, which leaves vLLM's psm_*
    ring buffers in /dev/shm unless the agent removes them."""
    cold = tmp_path / "cold-compile-cache"  # a cold cache keeps it compiling long enough
    spec = vllm_spec(venv, tiny_model, free_port(), cold)
    spec.stop_grace_seconds = 2
    server_id = agent.stub.StartServer(
        agent_pb2.StartServerRequest(spec=spec), timeout=30
    ).server.id
    request = agent_pb2.WatchServerRequest(id=server_id)
    held: set[str] = set()
    for update in agent.stub.WatchServer(request, timeout=600):
        if update.server.phase == S.SERVER_PHASE_COMPILING:
            time.sleep(2)  # let it map its ring buffers
            current = agent.stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10)
            held = _held_files(_tree(current.server))
            break
        assert update.server.state not in (S.SERVER_STATE_FAILED, S.SERVER_STATE_READY)
    agent.stub.StopServer(agent_pb2.StopServerRequest(id=server_id), timeout=60)
    final = agent.stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server
    while final.state == S.SERVER_STATE_STOPPING:
        time.sleep(0.2)
        final = agent.stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10).server
    print(f"\nheld while compiling: {sorted(held)}\n{final.message}")
    print(f"removed by the agent: {list(final.leftovers_removed)}")
    assert final.state == S.SERVER_STATE_STOPPED, final.message
    left = sorted(p for p in held if Path(p).exists())
    assert not left, f"left behind: {left}"
