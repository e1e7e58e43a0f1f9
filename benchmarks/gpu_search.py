"""A search on a real GPU, then its answer re-measured by a client that is not tunelab's (issue 35).

One real agent and controller (SQLite) on the GPU host; the search is an ordinary spec over
``benchmarks/torch_server.py --max-batch`` (real GEMMs and attention per decode step; a larger
batch allocates more KV cache, so the largest must end ``CUDA_OOM``) with a p99 TPOT SLO and
``load: {concurrency: find}``. Then the search's winner and runner-up are re-measured at the loads
the search found, each on fresh server launches interleaved A B B A, by the small asyncio client
below (it streams ``/v1/completions`` and counts chunks itself), and the two answers are set side
by side. Writes ``search.json`` (``search show --json``), ``remeasure.json`` and a markdown table
under ``--out``. On the H200 (the run tool)::

    PYTHONPATH=$PWD:$PWD/agent:$PWD/proto:$PWD/controller \\
        python3 benchmarks/gpu_search.py --out $OUT

``--simulate`` runs the same pipeline against the simulator (no GPU; a smoke test here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
import yaml  # noqa: E402

from tests.support.agent_proc import AgentProcess  # noqa: E402
from tests.support.controller_proc import ControllerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

SIM_FLAGS = {"--model": "torch-decode", "--startup-seconds": 0.2, "--step-ms-base": 2,
             "--step-ms-per-seq": 0.02, "--oom-above-seqs": 512}  # fmt: skip


def server_argv(args: argparse.Namespace, batch: int, port: int) -> list[str]:
    if args.simulate:
        flags = [str(x) for kv in SIM_FLAGS.items() for x in kv]
        return [sys.executable, "-P", "-m", "tunelab.bench.simulator", "--port", str(port),
                "--max-num-seqs", str(batch), *flags]  # fmt: skip
    script = str(HERE / "benchmarks" / "torch_server.py")
    return [args.server_python, script, "--port", str(port), "--max-batch", str(batch),
            "--hidden", "4096", "--layers", "8", "--context", "1024"]  # fmt: skip


def spec(args: argparse.Namespace) -> dict[str, Any]:
    """The search as a user would write it: the space's first point is the default."""
    if args.simulate:
        axis = "--max-num-seqs"
        command: list[Any] = ["{python}", "-P", "-m", "tunelab.bench.simulator"]
        flags: dict[str, Any] = {"--port": "{port}", **SIM_FLAGS}
    else:
        axis = "--max-batch"
        command = [args.server_python, str(HERE / "benchmarks" / "torch_server.py")]
        flags = {"--port": "{port}", "--hidden": 4096, "--layers": 8, "--context": 1024}
    flags[axis] = args.space[0]
    return {
        "name": "gpu-search",
        "host": {"labels": {"pool": "gpu"}},
        "server": {
            "command": command,
            "flags": flags,
            "port": "auto",
            "ready": {"path": "/health", "model": "torch-decode", "timeout": "5m"},
            "stop_grace": "10s",
        },
        "benchmark": {"input_len": 32, "output_len": args.output_len},
        "max_duration": "20m",
        "search": {
            "space": {f"server.flags.{axis}": list(args.space)},
            "objective": {"maximize": "output_throughput"},
            "slo": {
                "tpot_p99_ms": args.slo_tpot,
                **({"ttft_p99_ms": args.slo_ttft} if args.slo_ttft else {}),
            },
            "load": {
                "concurrency": "find",
                "max": max(args.space),
                **({"plateau": args.plateau} if args.plateau else {}),
            },
            "budget": {"trials": args.trials, "confirm": args.confirm},
            "strategy": "grid",
        },
    }


async def _one(session: aiohttp.ClientSession, url: str, tokens: int) -> tuple[float, int, float]:
    """One streamed completion: (ttft s, chunks, decode s after the first chunk)."""
    body = {"model": "torch-decode", "prompt": "x " * 32, "max_tokens": tokens, "stream": True,
            "ignore_eos": True}  # fmt: skip
    start = time.perf_counter()
    first = last = 0.0
    chunks = 0
    async with session.post(url, json=body) as response:
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            if json.loads(line[5:]).get("choices"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    return first - start, chunks, last - first


async def _load(port: int, concurrency: int, requests: int, tokens: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/v1/completions"
    left = requests
    results: list[tuple[float, int, float]] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=600)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            results.append(await _one(session, url, tokens))

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    tpots = sorted(d / (n - 1) * 1000 for _, n, d in results if n > 1)
    return {
        "output_throughput": sum(n for _, n, _ in results) / wall,
        "tpot_p99_ms": tpots[min(len(tpots) - 1, int(0.99 * len(tpots)))],
        "ttft_p99_ms": sorted(t for t, _, _ in results)[int(0.99 * (len(results) - 1))] * 1000,
        "requests": len(results),
        "wall_s": wall,
    }


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("server not healthy")


def remeasure(args: argparse.Namespace, batch: int, concurrency: int) -> dict[str, float]:
    """One fresh launch of the server at ``batch``, one measured load at ``concurrency``."""
    port = free_port()
    log = Path(args.out) / "remeasure-server.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(server_argv(args, batch, port), stdout=sink, stderr=sink)
    try:
        _wait_healthy(port, proc)
        requests = max(10, 5 * concurrency)
        asyncio.run(_load(port, min(concurrency, 8), 16, 4))  # warm-up, not counted
        return asyncio.run(_load(port, concurrency, requests, args.output_len))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="gpu-search-"))
    parser.add_argument("--space", type=lambda s: [int(x) for x in s.split(",")],
                        default=[8, 32, 128, 512, 1024])  # fmt: skip
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--confirm", type=int, default=4, help="the race's launches per contender")
    parser.add_argument("--slo-tpot", type=float, default=25.0)
    parser.add_argument("--slo-ttft", type=float, default=0.0, help="ms; 0: no TTFT SLO")
    parser.add_argument("--plateau", default="5%", help="the load search's plateau; '': none")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--launches", type=int, default=4, help="re-measure launches per config")
    parser.add_argument("--server-python", default=sys.executable)
    parser.add_argument("--simulate", action="store_true", help="the simulator, no GPU")
    parser.add_argument("--search-deadline", type=float, default=2400, help="seconds")
    parser.add_argument("--skip-search", default="", help="a search.json to re-measure only")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.skip_search:
        document = json.loads(Path(args.skip_search).read_text())
    else:
        document = run_search(args, out)
    (out / "search.json").write_text(json.dumps(document, indent=1))
    print(f"search: {document.get('state')} in {time.monotonic() - started:.0f} s", flush=True)
    ranked = sorted(
        (t for t in document["trials"] if t.get("objective") is not None),
        key=lambda t: -float(t["objective"]),
    )
    top: list[dict[str, Any]] = []
    for trial in ranked:
        params = trial["params"]
        if all(t["params"] != params for t in top):
            top.append(trial)
    best = document.get("best") or {}
    runner = best.get("vs_runner_up") or {}
    if best.get("params") and runner.get("params"):  # the race's answer decides the two
        wanted = [best["params"], runner["params"]]
        chosen = [next((t for t in top if t["params"] == w), None) for w in wanted]
        top = [t for t in chosen if t is not None] or top
    top = top[:2]
    print("answer:", document.get("answer"), flush=True)
    for t in document["trials"]:
        print(f"  trial {t['number']}: {t['params']} {t['state']} objective={t['objective']} "
              f"load={t.get('load')} {t.get('failure_reason') or ''}")  # fmt: skip
    print("best:", json.dumps(document.get("best"), indent=None)[:600], flush=True)
    measured: dict[str, list[dict[str, float]]] = {}
    order = [0, 1, 1, 0] * ((args.launches + 1) // 2)
    for index in order[: 2 * args.launches] if len(top) == 2 else [0] * args.launches:
        trial = top[index]
        batch = int(next(iter(trial["params"].values())))
        concurrency = int((trial.get("load") or {}).get("concurrency") or 1)
        try:
            figures = remeasure(args, batch, concurrency)
        except (OSError, RuntimeError, aiohttp.ClientError) as error:  # said; the rest goes on
            print(f"  re-measure batch {batch} at c={concurrency} failed: {error!r}", flush=True)
            continue
        measured.setdefault(f"{batch}@c={concurrency}", []).append(figures)
        print(f"  re-measure batch {batch} at c={concurrency}: "
              f"{figures['output_throughput']:.0f} tok/s, p99 TPOT {figures['tpot_p99_ms']:.1f} ms",
              flush=True)  # fmt: skip
    (out / "remeasure.json").write_text(json.dumps(measured, indent=1))
    lines = ["| config | search objective | re-measured tok/s (mean, launches) | p99 TPOT ms |",
             "|---|---|---|---|"]  # fmt: skip
    for trial in top:
        batch = int(next(iter(trial["params"].values())))
        concurrency = int((trial.get("load") or {}).get("concurrency") or 1)
        runs = measured.get(f"{batch}@c={concurrency}", [])
        tps = [r["output_throughput"] for r in runs]
        if not tps:
            lines.append(f"| batch {batch} at c={concurrency} | {trial['objective']:.0f} | - | - |")
            continue
        lines.append(
            f"| batch {batch} at c={concurrency} | {trial['objective']:.0f} | "
            f"{statistics.fmean(tps):.0f} ({', '.join(f'{v:.0f}' for v in tps)}) | "
            f"{', '.join(format(r['tpot_p99_ms'], '.1f') for r in runs)} |"
        )
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(table)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0


def run_search(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpu-search-work-"))
    spec_path = work / "search.yaml"
    spec_path.write_text(yaml.safe_dump(spec(args), sort_keys=False))
    metrics = f"127.0.0.1:{free_port()}"
    agent = AgentProcess(work / "agent", ["--metrics-listen", metrics])
    controller = ControllerProcess(work / "controller")
    agent.start(60)
    controller.start(60)
    try:
        added = controller.cli("hosts", "add", "gpu", agent.address, "--label", "pool=gpu",
                               "--metrics-url", f"http://{metrics}/metrics")  # fmt: skip
        print(added.stdout, added.stderr, flush=True)
        time.sleep(2)
        submitted = controller.cli("submit", str(spec_path))
        (out / "submit.txt").write_text(submitted.stdout + submitted.stderr)
        print(submitted.stdout[-4000:], submitted.stderr[-2000:], flush=True)
        deadline = time.monotonic() + args.search_deadline
        document: dict[str, Any] = {}
        while True:  # poll, so that a run cut short still leaves what it found
            shown = controller.cli("search", "show", "gpu-search", "--json")
            if shown.returncode == 0:
                document = dict(json.loads(shown.stdout))
                (out / "search.json").write_text(json.dumps(document, indent=1))
                done = [t for t in document.get("trials", []) if t.get("state") != "RUNNING"]
                print(f"  {time.monotonic() - deadline + args.search_deadline:5.0f} s "
                      f"{document.get('state')}: {len(done)} trials ended", flush=True)  # fmt: skip
                if document.get("state") not in ("PENDING", "RUNNING", "RACING"):
                    break
            if time.monotonic() > deadline:
                print("search deadline passed: cancelled; what it has so far", flush=True)
                controller.cli("cancel", "gpu-search")
                time.sleep(15)  # its server stops before a re-measure needs the GPU
                break
            time.sleep(10)
        text = controller.cli("search", "show", "gpu-search").stdout
        (out / "search_show.txt").write_text(text)
        print(text, flush=True)
        return document
    finally:
        for name, proc in (("controller", controller), ("agent", agent)):
            (out / f"{name}.log").write_text(proc.log()[-200_000:])
            proc.terminate()


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    raise SystemExit(main())
