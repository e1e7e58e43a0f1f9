"""Peer comparison: tunelab's load generator beside GuideLLM 0.8.1 and AIPerf 0.13.0.

Against the simulator (chunk j at arrival + TTFT + j·D, one token per chunk, so the truth is
known), for each concurrency C, each tool runs a closed loop of R = max(waves·C, min-requests)
requests and then of 2R, each against a fresh simulator; accuracy comes from the 2R run, CPU
per chunk from the difference (start-up, imports and worker processes cancel out). The
simulator is pinned to core 0 and the client to core 1 (``taskset``), so neither steals the
other's CPU. Per tool and C, one Markdown table:

- TTFT and TPOT error: the tool's mean minus the truth (TTFT, D); TPOT is the per-request
  (E2E - TTFT)/(N - 1): tunelab's ``tpot``, GuideLLM's and AIPerf's ``inter_token_latency``;
- throughput against what the server saw: the tool's output tokens/s over the simulator's own
  count of tokens it streamed divided by its own window, from the first request's arrival to
  the last token written (``/sim/stats`` ``served``). That is the rate the server delivered in
  the run, whatever the load's shape; the steady-state truth C·N/(TTFT + (N-1)·D) is shown too,
  but a closed loop of a few waves only approaches it (the last wave drains with fewer than C
  in flight), so it would blame a client for the workload's shape;
- CPU: the client process tree's CPU seconds (the larger of rusage of the reaped children and
  a 0.1 s sample of every descendant), as the marginal cost per 10^6 chunks between the R and
  2R runs, and the 2R run's total;
- peak RSS: the largest sum of resident memory over the client's process tree (sampled).

A tool that cannot run at some C is recorded in the table with the reason (its log's last
line), not left out.

Set up the peers first (each in its own venv, ignored by git; from the configured pip index)::

    benchmarks/setup_peers.sh
    # = python3 -m venv .venv-guidellm && .venv-guidellm/bin/pip install torch==2.13.0 \\
    #       && .venv-guidellm/bin/pip install guidellm==0.8.1
    #   python3 -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0

Then::

    .venv/bin/python benchmarks/peer_loadgen.py [--concurrency 1,16,256] \\
        [--skip-guidellm] [--skip-aiperf] [--out benchmarks/results/peer_loadgen.md]

Both peers need a Hugging Face tokenizer: a word-level one is built here from Faker's word
list (GuideLLM's synthetic prompts are made of it) with a peer venv's ``transformers``, and
given to GuideLLM as a folder and to AIPerf as a repository id in a private Hugging Face cache
folder (AIPerf 0.13.0 under ``HF_HUB_OFFLINE=1`` resolves even a local path through the cache).
Nothing is downloaded: both run with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.client_accuracy_overhead import (  # noqa: E402
    OFFLINE,
    Clients,
    Measured,
    Workload,
    run_measured,
    sim_stats,
)
from tunelab.bench.simulator.process import SimulatorProcess  # noqa: E402

TOOLS = ("tunelab", "guidellm", "aiperf")
AIPERF_TOKENIZER = "tunelab/wordlevel"  # its id in the private cache folder
SERVER_CORE, CLIENT_CORE = "0", "1"


@dataclass
class Result:
    tool: str
    concurrency: int
    requests: int
    completed: int = 0
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    output_tps: float = 0.0
    served_tps: float = 0.0  # the simulator's tokens over its own window
    cpu_s: float = 0.0
    marginal_cpu_per_m: float = 0.0
    peak_rss_mib: float = 0.0
    wall_s: float = 0.0
    note: str = ""
    failed: str = ""  # why the tool could not run here (the row says so)


class PeerClients(Clients):
    """The two clients of client_accuracy_overhead.py, plus AIPerf."""

    def __init__(
        self,
        work: Path,
        workload: Workload,
        guidellm: Path | None,
        aiperf: Path | None,
        pin: list[str],
    ) -> None:
        python = next((p.parent / "python" for p in (guidellm, aiperf) if p is not None), None)
        super().__init__(work, workload, guidellm, pin, tokenizer_python=python)
        self.aiperf = aiperf
        self.hf_cache = work / "hf-cache"
        if aiperf is not None:
            repo = self.hf_cache / ("models--" + AIPERF_TOKENIZER.replace("/", "--"))
            revision = "0" * 39 + "1"
            (repo / "refs").mkdir(parents=True)
            (repo / "refs" / "main").write_text(revision)
            shutil.copytree(self.tokenizer, repo / "snapshots" / revision)

    def run_aiperf(
        self, url: str, concurrency: int, requests: int, tag: str
    ) -> tuple[dict[str, Any], Measured]:
        if self.aiperf is None:
            raise RuntimeError("aiperf not configured")
        out = self.work / f"aiperf-{tag}"
        argv = [
            str(self.aiperf), "profile",
            "--model", "sim", "--url", url, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", AIPERF_TOKENIZER,
            "--concurrency", str(concurrency), "--request-count", str(requests),
            "--isl", str(self.workload.input_len), "--osl", str(self.workload.output_len),
            "--extra-inputs", "ignore_eos:true", "--random-seed", "0",
            "--ui", "none", "--no-gpu-telemetry", "--artifact-dir", str(out),
        ]  # fmt: skip
        env = {**OFFLINE, "HF_HUB_CACHE": str(self.hf_cache)}
        run = run_measured(argv, self.work / f"aiperf-{tag}.log", env, self.pin)
        summary: dict[str, Any] = json.loads((out / "profile_export_aiperf.json").read_text())
        return summary, run


def last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "(no output)"


def pin_server(pid: int) -> None:
    """Every thread of the simulator onto the server's core."""
    subprocess.run(
        ["taskset", "-a", "-cp", SERVER_CORE, str(pid)], check=True, stdout=subprocess.DEVNULL
    )


def measure(clients: PeerClients, tool: str, concurrency: int, requests: int) -> Result:
    wl = clients.workload
    args = ["--ttft-ms", str(wl.ttft_ms), "--itl-ms", str(wl.itl_ms), "--model", "sim"]
    tag = f"c{concurrency}-r{requests}"
    result = Result(tool, concurrency, requests)
    with SimulatorProcess(args, clients.work / f"sim-{tool}-{tag}.log") as sim:
        assert sim.proc is not None
        pin_server(sim.proc.pid)
        if tool == "tunelab":
            point, run = clients.tunelab(sim.url, concurrency, requests, tag)
            result.completed = point["completed"]
            result.ttft_ms = point["mean_ttft_ms"]
            result.tpot_ms = point["mean_tpot_ms"]
            result.output_tps = point["output_throughput"]
            if point["client_saturated"]:
                result.note = "flagged client_saturated: " + "; ".join(
                    point["client_check"]["reasons"]
                )
        elif tool == "guidellm":
            bench, run = clients.run_guidellm(sim.url, concurrency, requests, tag)
            metrics = bench["metrics"]
            result.completed = metrics["request_totals"]["successful"]
            result.ttft_ms = metrics["time_to_first_token_ms"]["successful"]["mean"]
            result.tpot_ms = metrics["inter_token_latency_ms"]["successful"]["mean"]
            tokens = metrics["output_token_count"]["successful"]["total_sum"]
            result.output_tps = tokens / bench["duration"] if bench["duration"] else 0.0
        else:
            summary, run = clients.run_aiperf(sim.url, concurrency, requests, tag)
            result.completed = int(summary["request_count"]["avg"])
            result.ttft_ms = summary["time_to_first_token"]["avg"]
            result.tpot_ms = summary["inter_token_latency"]["avg"]
            result.output_tps = summary["output_token_throughput"]["avg"]
            errors = summary.get("error_summary") or []
            if errors:
                result.note = f"errors: {errors}"[:200]
        served = sim_stats(sim.url)["served"]
    if served["seconds"] > 0:
        result.served_tps = served["tokens"] / served["seconds"]
    result.cpu_s, result.wall_s, result.peak_rss_mib = run.cpu_s, run.wall_s, run.peak_rss_mib
    return result


def measure_pair(clients: PeerClients, tool: str, concurrency: int, requests: int) -> Result:
    """R and 2R requests: accuracy from the larger run, CPU per chunk from the difference;
    a tool that fails is a row that says why."""
    try:
        small = measure(clients, tool, concurrency, requests)
        large = measure(clients, tool, concurrency, 2 * requests)
    except (RuntimeError, OSError, KeyError, ValueError) as exc:
        log = clients.work / f"{tool}-c{concurrency}-r{2 * requests}.log"
        if not log.exists():
            log = clients.work / f"{tool}-c{concurrency}-r{requests}.log"
        reason = f"{exc}"[:160] + (f" (log: {last_line(log)})" if log.exists() else "")
        return Result(tool, concurrency, 2 * requests, failed=reason)
    extra = (large.completed - small.completed) * clients.workload.output_len
    if extra > 0:
        large.marginal_cpu_per_m = (large.cpu_s - small.cpu_s) / extra * 1e6
    return large


def table(concurrency: int, rows: list[Result], workload: Workload) -> str:
    steady = workload.steady_tps(concurrency)
    lines = [
        f"**C = {concurrency}** (steady-state truth {steady:,.1f} tok/s)",
        "",
        (
            "| tool | ok/sent | TTFT err ms | TPOT err ms | tok/s vs server-seen | tok/s vs "
            "steady truth | CPU s / 10^6 chunks | CPU s, 2R run | peak RSS MiB |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.failed:
            lines.append(f"| {r.tool} | — | {r.failed} | | | | | | |")
            continue
        vs_served = f"{100 * (r.output_tps / r.served_tps - 1):+.2f} %" if r.served_tps else "—"
        vs_steady = f"{100 * (r.output_tps / steady - 1):+.2f} %"
        marginal = f"{r.marginal_cpu_per_m:,.0f}" if r.marginal_cpu_per_m > 0 else "n/m"
        lines.append(
            f"| {r.tool} | {r.completed}/{r.requests} | {r.ttft_ms - workload.ttft_ms:+.2f} | "
            f"{r.tpot_ms - workload.itl_ms:+.3f} | {vs_served} | {vs_steady} | {marginal} | "
            f"{r.cpu_s:.1f} | {r.peak_rss_mib:,.0f} |"
        )
    return "\n".join(lines)


def render(
    args: argparse.Namespace,
    workload: Workload,
    load: tuple[float, float],
    skipped: dict[str, str],
    results: list[Result],
) -> str:
    setup = (
        f"Simulator truth: TTFT {workload.ttft_ms:g} ms, D = {workload.itl_ms:g} ms per chunk "
        f"(one token per chunk), {workload.output_len} output tokens, {workload.input_len}-token "
        "prompts, /v1/completions, streaming, EOS ignored; a closed loop of R = "
        f"max({args.waves}·C, {args.min_requests}) requests and of 2R (figures from the 2R "
        "run), a fresh simulator for each run, no warm-up."
    )
    machine = (
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; simulator on core {SERVER_CORE}, client on core "
        f"{CLIENT_CORE} (taskset); load average before {load[0]:.2f}, after {load[1]:.2f} "
        "(other engineers share the machine)."
    )
    legend = (
        "TTFT/TPOT err: the tool's mean minus the truth. tok/s vs server-seen: the tool's "
        "output throughput over the simulator's own (tokens it streamed / first arrival to last "
        "token), the rate the server delivered in that run. tok/s vs steady truth: over "
        "C·N/(TTFT + (N-1)·D), which a closed loop of few waves only approaches. CPU per 10^6 "
        "chunks: (CPU of the 2R run - CPU of the R run) / extra chunks (n/m: not measurable, "
        "below the run-to-run variation of start-up). Peak RSS: the client's process tree, "
        "summed, sampled every 0.1 s."
    )
    parts = ["# Load generators side by side: tunelab, GuideLLM 0.8.1, AIPerf 0.13.0", setup]
    parts.append(machine)
    for c in sorted({r.concurrency for r in results}):
        rows = [r for r in results if r.concurrency == c]
        rows += [Result(t, c, 0, failed=f"not run: {why}") for t, why in skipped.items()]
        rows.sort(key=lambda r: TOOLS.index(r.tool))
        parts.append(table(c, rows, workload))
    parts.append(legend)
    notes = [f"- {r.tool} c={r.concurrency}: {r.note}" for r in results if r.note]
    if notes:
        parts.append("\n".join(notes))
    shown = [a for a in args.argv if a != "--out" and Path(a) != args.out]
    command = " ".join([".venv/bin/python benchmarks/peer_loadgen.py", *shown])
    parts.append(f"Command: `{command}`")
    return "\n\n".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--concurrency", default="1,16,256")
    p.add_argument("--ttft-ms", type=float, default=300.0)
    p.add_argument("--itl-ms", type=float, default=97.0)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--waves", type=int, default=1, help="R = waves x C; runs of R and 2R")
    p.add_argument("--min-requests", type=int, default=2)
    p.add_argument("--guidellm", type=Path, default=REPO / ".venv-guidellm" / "bin" / "guidellm")
    p.add_argument("--aiperf", type=Path, default=REPO / ".venv-aiperf" / "bin" / "aiperf")
    p.add_argument("--skip-guidellm", action="store_true")
    p.add_argument("--skip-aiperf", action="store_true")
    p.add_argument("--out", type=Path, help="write the Markdown report here")
    args = p.parse_args()
    args.argv = sys.argv[1:]
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None:
        print("needs taskset and 2 cores (server and client pinned apart)", file=sys.stderr)
        return 2
    workload = Workload(args.ttft_ms, args.itl_ms, args.input_len, args.output_len)
    skipped: dict[str, str] = {}
    peers: dict[str, Path | None] = {}
    for tool, path, skip in (
        ("guidellm", args.guidellm, args.skip_guidellm),
        ("aiperf", args.aiperf, args.skip_aiperf),
    ):
        if skip:
            skipped[tool] = f"--skip-{tool}"
        elif not path.exists():
            print(f"no {tool} at {path}: run benchmarks/setup_peers.sh or --skip-{tool}")
            return 2
        peers[tool] = None if skip else path
    tools = [t for t in TOOLS if t not in skipped]
    load0 = os.getloadavg()[0]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="peer-loadgen-") as tmp:
        clients = PeerClients(
            Path(tmp), workload, peers["guidellm"], peers["aiperf"], ["taskset", "-c", CLIENT_CORE]
        )
        for c in (int(x) for x in args.concurrency.split(",")):
            requests = max(args.waves * c, args.min_requests)
            for tool in tools:
                result = measure_pair(clients, tool, c, requests)
                print(f"{tool} c={c}: {result}", file=sys.stderr, flush=True)
                results.append(result)
    report = render(args, workload, (load0, os.getloadavg()[0]), skipped, results)
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
