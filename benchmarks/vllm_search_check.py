"""A search on a real vLLM (CPU build), its answer re-measured by ``vllm bench serve`` (issue 35).

One real agent and controller (SQLite) on loopback; the search is the issue's: ``--max-num-seqs``
[1, 4, 16] x ``--max-num-batched-tokens`` [512, 2048] of ``vllm serve`` (the engines venv, the
tiny random Llama of ``tests/engines/make_model.py``), maximize output throughput under p99 TPOT
and p99 TTFT SLOs, ``load: {concurrency: find}``, ``benchmark.tokenizer: model`` (lengths in
tokens), one trial at a time, and a small ``budget.confirm`` for the race. Then the answer's winner
and runner-up (``best.params``, ``best.vs_runner_up.params``) are re-measured at the race's load
by vLLM's own client, ``vllm bench serve``, each run on a fresh server launch, interleaved
A B B A ..., and the two answers are set side by side.

The server is pinned to core 0 and everything else (agent, controller, load generator,
``vllm bench serve``) to core 1, as ``tests/engines`` does. Run it under ``taskset -c 1``::

    taskset -c 1 .venv/bin/python benchmarks/vllm_search_check.py \\
        --venv "$(bash tests/engines/setup_venv.sh)"

Writes ``search.json`` (``search show --json``), ``search_show.txt``, ``remeasure.json`` and
``table.md`` under ``--out``, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import yaml  # noqa: E402
from scipy import stats  # noqa: E402

from tests.support.agent_proc import AgentProcess  # noqa: E402
from tests.support.controller_proc import ControllerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

SERVER_CPU = "0"
CLIENT_CPU = "1"
SEQS = "server.flags.--max-num-seqs"
TOKENS = "server.flags.--max-num-batched-tokens"


def vllm_env(cache: Path) -> dict[str, str]:
    """Loopback only, no telemetry, no hub, a small KV cache, a warm compile cache (as
    ``tests/engines/conftest.py``)."""
    return {
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": SERVER_CPU,
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CACHE_ROOT": str(cache),
    }


def base_flags(model: Path) -> dict[str, Any]:
    return {
        "--host": "127.0.0.1",
        "--port": "{port}",
        "--served-model-name": "tiny",
        "--max-model-len": 512,
        "--enforce-eager": True,
        "--tokenizer": str(model),  # benchmark.tokenizer: model finds it here
        "--max-num-seqs": 1,
        "--max-num-batched-tokens": 512,
    }


def command(venv: Path, model: Path) -> list[str]:
    return ["taskset", "-c", SERVER_CPU, str(venv / "bin" / "vllm"), "serve", str(model)]


def spec(args: argparse.Namespace, model: Path, cache: Path) -> dict[str, Any]:
    """The search as a user would write it: the space's first point (1 / 512) is the default."""
    return {
        "name": "vllm-search-check",
        "host": {"labels": {"pool": "cpu"}},
        "server": {
            "command": command(args.venv, model),
            "flags": base_flags(model),
            "env": vllm_env(cache),
            "port": "auto",
            "ready": {"path": "/health", "model": "tiny", "timeout": "5m"},
            "stop_grace": "30s",
        },
        "benchmark": {
            "input_len": args.input_len,
            "output_len": args.output_len,
            "tokenizer": "model",
            # Without requests or duration per point, every race launch (a fixed load) is refused
            # "benchmark: set requests (per point) or duration (per point)" and the race re-queues
            # it without end (seen here: 1,450 SKIPPED trials in 2 minutes).
            "duration": args.point_duration,
        },
        "max_duration": "20m",
        "search": {
            "space": {SEQS: [1, 4, 16], TOKENS: [512, 2048]},
            "objective": {"maximize": "output_throughput"},
            "slo": {"tpot_p99_ms": args.slo_tpot, "ttft_p99_ms": args.slo_ttft},
            "load": {"concurrency": "find", "max": args.max_concurrency},
            "budget": {"trials": 6, "confirm": args.confirm, "duration": args.duration},
            "strategy": "grid",
            "parallel": 1,
        },
    }


def run_search(args: argparse.Namespace, work: Path, model: Path, cache: Path) -> dict[str, Any]:
    spec_path = work / "search.yaml"
    spec_path.write_text(yaml.safe_dump(spec(args, model, cache), sort_keys=False))
    agent = AgentProcess(work / "agent", ["--metrics-listen", f"127.0.0.1:{free_port()}"])
    controller = ControllerProcess(work / "controller")
    agent.start(60)
    controller.start(60)
    out = args.out
    try:
        added = controller.cli("hosts", "add", "cpu", agent.address, "--label", "pool=cpu")
        print(added.stdout.strip(), added.stderr.strip(), flush=True)
        time.sleep(2)
        submitted = controller.cli("submit", str(spec_path), "--wait", timeout=7200)
        (out / "submit.txt").write_text(submitted.stdout + submitted.stderr)
        print(submitted.stdout[-3000:], submitted.stderr[-2000:], flush=True)
        shown = controller.cli("search", "show", "vllm-search-check", "--json")
        document = dict(json.loads(shown.stdout))
        text = controller.cli("search", "show", document["group"]).stdout
        (out / "search_show.txt").write_text(text)
        print(text, flush=True)
        return document
    finally:
        for name, proc in (("controller", controller), ("agent", agent)):
            (out / f"{name}.log").write_text(proc.log()[-200_000:])
            proc.terminate()


def _metric_sum_count(port: int, name: str) -> tuple[float, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(f"vllm:{name}_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"vllm:{name}_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 300) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return time.monotonic() - start
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("vllm serve not healthy in time")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # its own session: API server, EngineCore, Worker
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def remeasure(
    args: argparse.Namespace, model: Path, cache: Path, params: dict[str, Any], concurrency: int
) -> dict[str, float]:
    """One fresh ``vllm serve`` launch with ``params``, one ``vllm bench serve`` run at
    ``concurrency`` (client on core 1), vLLM's own queue time read from /metrics around it."""
    port = free_port()
    flags = base_flags(model)
    for path, value in params.items():
        flags[path.removeprefix("server.flags.")] = value
    argv = command(args.venv, model)
    for name, value in flags.items():
        value = port if value == "{port}" else value
        argv += [name] if value is True else [name, str(value)]
    runs = args.out / "runs"
    runs.mkdir(exist_ok=True)
    index = len(list(runs.glob("*.json")))
    with (args.out / "remeasure-server.log").open("ab") as sink:
        proc = subprocess.Popen(
            argv, stdout=sink, stderr=sink, env={**os.environ, **vllm_env(cache)},
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    try:
        started = _wait_healthy(port, proc)
        queue_before = _metric_sum_count(port, "request_queue_time_seconds")
        prompts = max(40, 10 * concurrency)
        name = f"{index:02d}.json"
        bench = ["taskset", "-c", CLIENT_CPU, str(args.venv / "bin" / "vllm"), "bench", "serve"]
        bench += ["--backend", "openai", "--base-url", f"http://127.0.0.1:{port}"]
        bench += ["--model", "tiny", "--tokenizer", str(model), "--dataset-name", "random"]
        bench += ["--random-input-len", str(args.input_len)]
        bench += ["--random-output-len", str(args.output_len), "--ignore-eos"]
        bench += ["--temperature", "0", "--max-concurrency", str(concurrency)]
        bench += ["--num-prompts", str(prompts), "--percentile-metrics", "ttft,tpot,itl"]
        bench += ["--metric-percentiles", "50,99", "--save-result"]
        bench += ["--result-dir", str(runs), "--result-filename", name]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        with (args.out / "remeasure-bench.log").open("ab") as sink:
            subprocess.run(bench, check=True, timeout=600, env=env, stdout=sink, stderr=sink)
        queue_after = _metric_sum_count(port, "request_queue_time_seconds")
    finally:
        _stop(proc)
    result = json.loads((runs / name).read_text())
    served = queue_after[1] - queue_before[1]
    return {
        "output_throughput": float(result["output_throughput"]),
        "tpot_p99_ms": float(result["p99_tpot_ms"]),
        "ttft_p99_ms": float(result["p99_ttft_ms"]),
        "completed": float(result["completed"]),
        "queue_mean_ms": (queue_after[0] - queue_before[0]) / served * 1000 if served else 0.0,
        "start_s": started,
    }


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and a 95 % t interval over runs (each run a fresh launch)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def ratio_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """A over B in percent: Welch's 95 % interval on the difference of mean logs."""
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    result = stats.ttest_ind(la, lb, equal_var=False)
    low, high = result.confidence_interval(0.95)
    diff = statistics.fmean(la) - statistics.fmean(lb)
    return tuple(100 * (math.exp(x) - 1) for x in (diff, low, high))  # type: ignore[return-value]


def label(params: dict[str, Any]) -> str:
    return f"{params.get(SEQS)} / {params.get(TOKENS)}"


def verdicts(document: dict[str, Any], change: tuple[float, float, float]) -> tuple[str, str, str]:
    """(the search's verdict, the re-measure's, whether they agree)."""
    best = document.get("best") or {}
    verdict = str((best.get("vs_runner_up") or {}).get("verdict") or best.get("verdict"))
    margin = 100 * float(document.get("margin") or 0.02)
    _, low, high = change
    if low > 0:
        theirs = "winner better"
    elif high < 0:
        theirs = "runner-up better"
    elif -margin <= low and high <= margin:
        theirs = "tie"
    else:
        theirs = "not separated"
    if verdict == "better":
        agree = {"winner better": "agrees", "runner-up better": "DISAGREES"}.get(
            theirs, "not confirmed: the re-measure does not separate them"
        )
    elif verdict == "tie":
        agree = "agrees" if theirs in ("tie", "not separated") else "DISAGREES: not a tie"
    else:  # undecided, racing, alone
        agree = (
            "consistent: neither separates them"
            if theirs in ("tie", "not separated")
            else f"the re-measure decides what the search left {verdict}: {theirs}"
        )
    return verdict, theirs, agree


def report(document: dict[str, Any], measured: dict[str, list[dict[str, float]]]) -> str:
    best = document["best"]
    rival = best["vs_runner_up"]
    load = int(best["load"]["concurrency"])
    answer = document.get("answer") or document.get("message", "")
    lines = [
        f"search: {document['state']}, answer: {answer}",
        "",
        (
            f"| configuration (seqs / batched tokens) | search at c={load}: mean [95 % interval], "
            f"launches | `vllm bench serve` at c={load}, fresh launches (tok/s) | "
            "mean [95 % t interval] | vLLM mean queue time (ms) |"
        ),
        "|---|---|---|---|---|",
    ]
    # a trial's objective, interval and launches are over its configuration's launches at its
    # load up to it: the runner-up's latest trial at the race's load holds all of them
    runner = max(
        (t for t in document["trials"]
         if t["params"] == rival["params"] and t.get("load") == best["load"]
         and t.get("objective") is not None),
        key=lambda t: int(t["number"]),
    )  # fmt: skip
    rows = [
        ("winner", best["params"], best["objective"], best.get("interval"), best.get("launches")),
        ("runner-up", rival["params"], runner.get("objective"), runner.get("interval"),
         runner.get("launches")),
    ]  # fmt: skip
    for role, params, objective, interval, launches in rows:
        runs = measured[label(params)]
        tps = [r["output_throughput"] for r in runs]
        mean, low, high = mean_interval(tps)
        search = f"{objective:.1f}" if objective is not None else "-"
        if interval:
            search += f" [{interval[0]:.1f}, {interval[1]:.1f}]"
        queue = ", ".join(f"{r['queue_mean_ms']:.1f}" for r in runs)
        lines.append(
            f"| {label(params)} ({role}) | {search}, {launches} launches | "
            f"{', '.join(f'{v:.0f}' for v in tps)} | {mean:.1f} [{low:.1f}, {high:.1f}] | "
            f"{queue} |"
        )
    a = [r["output_throughput"] for r in measured[label(best["params"])]]
    b = [r["output_throughput"] for r in measured[label(rival["params"])]]
    change = ratio_interval(a, b)
    verdict, theirs, agree = verdicts(document, change)
    launches = rival.get("launches")
    lines += [
        "",
        (
            f"- search: winner vs runner-up {rival.get('change_pct')} % {rival.get('interval')} "
            f"(confidence {rival.get('confidence')}), launches {launches}, verdict **{verdict}**"
        ),
        (
            f"- re-measure: winner vs runner-up {change[0]:+.1f} % [{change[1]:+.1f}, "
            f"{change[2]:+.1f}] (Welch 95 % on log tok/s, {len(a)} + {len(b)} launches): "
            f"**{theirs}**"
        ),
        f"- the search's verdict against the re-measure: **{agree}**",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, required=True, help="the engines venv")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="vllm-check-")))
    parser.add_argument("--slo-tpot", type=float, default=40.0)
    parser.add_argument("--slo-ttft", type=float, default=500.0)
    parser.add_argument("--input-len", type=int, default=124, help="tokens (the issue's case)")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--point-duration", default="10s", help="benchmark.duration per point")
    parser.add_argument("--confirm", type=int, default=3, help="the race's launches per contender")
    parser.add_argument("--duration", default="20m", help="the search's wall-time budget")
    parser.add_argument("--runs", type=int, default=5, help="re-measure launches per config")
    parser.add_argument("--skip-search", type=Path, help="a search.json to re-measure only")
    parser.add_argument(
        "--remeasured", type=Path, help="with --skip-search: a remeasure.json to tabulate only"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vllm-check-work-"))
    model = work / "tiny-llama"
    subprocess.run(
        [str(args.venv / "bin" / "python"), "-P", str(HERE / "tests/engines/make_model.py"),
         str(model)], check=True, timeout=300, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tunelab"
    cache = cache / "vllm-compile-cache"
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.skip_search:
        document = json.loads(args.skip_search.read_text())
    else:
        document = run_search(args, work, model, cache)
    (args.out / "search.json").write_text(json.dumps(document, indent=1))
    print(f"search: {document.get('state')} in {time.monotonic() - started:.0f} s", flush=True)
    best = document.get("best") or {}
    if not best.get("vs_runner_up"):
        print("no runner-up to re-measure:", json.dumps(best)[:1000])
        return 1
    load = int(best["load"]["concurrency"])
    pair = [best["params"], best["vs_runner_up"]["params"]]
    measured: dict[str, list[dict[str, float]]] = {}
    order = ([0, 1, 1, 0] * args.runs)[: 2 * args.runs]
    if args.remeasured:
        measured, order = json.loads(args.remeasured.read_text()), []
    for index in order:
        figures = remeasure(args, model, cache, pair[index], load)
        measured.setdefault(label(pair[index]), []).append(figures)
        print(
            f"  re-measure {label(pair[index])} at c={load}: "
            f"{figures['output_throughput']:.1f} tok/s, p99 TPOT {figures['tpot_p99_ms']:.1f} ms, "
            f"p99 TTFT {figures['ttft_p99_ms']:.0f} ms, queue {figures['queue_mean_ms']:.1f} ms, "
            f"up in {figures['start_s']:.0f} s",
            flush=True,
        )
    (args.out / "remeasure.json").write_text(json.dumps(measured, indent=1))
    table = report(document, measured)
    (args.out / "table.md").write_text(table + "\n")
    print(table)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
