"""Client accuracy and overhead: tunelab's load generator and guidellm side by side, one run.

Against the simulator on this machine (chunk j at arrival + TTFT + j·D, so the truth is known),
for each concurrency C: each client runs a closed loop of ``waves x C`` requests (at least
``--min-requests``) of N output tokens, one token per chunk. Reported per client and C:

- TTFT and TPOT error: the client's mean minus the truth (TTFT, D). TPOT is the per-request
  ``(E2E - TTFT)/(N - 1)``: tunelab's ``tpot``, guidellm's ``inter_token_latency``.
- throughput: the client's output tokens/s over its steady-state truth C·N/(TTFT + (N-1)·D).
- CPU per million chunks: the client process tree's CPU time (rusage of the reaped child, which
  includes its reaped workers), as the marginal cost between a run of R and one of 2R requests
  (start-up, imports and worker processes cancel out), per 10^6 streamed chunks; and the
  larger run's total CPU.
- the simulator's own write lateness, so a late server is not blamed on a client.

Usage::

    .venv/bin/python benchmarks/client_accuracy_overhead.py \\
        [--concurrency 1,64,256,1024] [--guidellm .venv-guidellm/bin/guidellm] [--out FILE.md]

guidellm 0.8.1 lives in its own venv (``benchmarks/setup_peers.sh`` makes ``.venv-guidellm``:
``pip install torch==2.13.0`` first, the CPU wheel, then ``pip install guidellm==0.8.1``).
``benchmarks/peer_loadgen.py`` adds AIPerf to the comparison, with server and client pinned.
It needs a tokenizer: this script builds a word-level one from Faker's word list (the text
guidellm's synthetic prompts are made of) with that venv's ``tokenizers``/``transformers``;
nothing is downloaded (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunelab.bench.config import BenchConfig  # noqa: E402
from tunelab.bench.datasets import VOCABULARY  # noqa: E402
from tunelab.bench.launcher import BenchFiles, bench_argv  # noqa: E402
from tunelab.bench.simulator.process import SimulatorProcess  # noqa: E402

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
try:
    from faker.providers.lorem.en_US import Provider
    words = Provider.word_list
except ImportError:  # a venv without guidellm's faker: the words given
    words = sys.argv[2].split()
vocab = {"[UNK]": 0, "[BOS]": 1, "[EOS]": 2, ".": 3, ",": 4}
for word in words:
    vocab.setdefault(word, len(vocab))
    vocab.setdefault(word.capitalize(), len(vocab))
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(
    tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
).save_pretrained(sys.argv[1])
"""


@dataclass
class Outcome:
    client: str
    concurrency: int
    requests: int
    completed: int = 0
    chunks: int = 0
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    output_tps: float = 0.0
    cpu_s: float = 0.0  # the whole client process tree
    marginal_cpu_per_m: float = 0.0  # CPU seconds per 10^6 chunks, R -> 2R requests
    wall_s: float = 0.0
    sim_lateness: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Workload:
    ttft_ms: float
    itl_ms: float
    input_len: int
    output_len: int

    def steady_tps(self, concurrency: int) -> float:
        per_request = (self.ttft_ms + (self.output_len - 1) * self.itl_ms) / 1000.0
        return concurrency * self.output_len / per_request


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Measured:
    cpu_s: float  # the client's process tree: reaped (rusage) or sampled, whichever is more
    wall_s: float
    peak_rss_mib: float  # the largest sum of RSS over the tree, sampled every 0.1 s


class TreeSampler(threading.Thread):
    """Samples a process and its descendants: peak summed RSS, and each one's CPU time (so
    workers that are never reaped by the client, or are reparented, still count)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak_rss = 0
        self.cpu: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                root = psutil.Process(self.pid)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            rss = 0
            for proc in tree:
                try:
                    with proc.oneshot():
                        rss += proc.memory_info().rss
                        times = proc.cpu_times()
                        self.cpu[proc.pid] = times.user + times.system
                except psutil.Error:
                    continue
            self.peak_rss = max(self.peak_rss, rss)
            self.done.wait(self.interval)


def run_measured(
    argv: list[str], log: Path, env: dict[str, str] | None = None, pin: list[str] | None = None
) -> Measured:
    """Run a client to completion (under ``pin``, e.g. ``taskset -c 1``): its CPU seconds with
    its descendants', wall seconds and peak RSS."""
    cpu0, wall0 = child_cpu(), time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*(pin or []), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        sampler = TreeSampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.done.set()
        sampler.join()
    if code != 0:
        raise RuntimeError(f"{argv[0]} exited {code}; see {log}")
    cpu = max(child_cpu() - cpu0, sum(sampler.cpu.values()))
    return Measured(cpu, time.perf_counter() - wall0, sampler.peak_rss / 2**20)


def sim_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/sim/stats", timeout=10) as resp:
        stats: dict[str, Any] = json.loads(resp.read())
    return stats


def build_tokenizer(python: Path, out: Path) -> None:
    """The word-level tokenizer (Faker's words, else tunelab's own) with that venv's
    transformers, saved as a Hugging Face tokenizer folder; nothing is downloaded."""
    subprocess.run(
        [str(python), "-c", TOKENIZER_SCRIPT, str(out), " ".join(VOCABULARY)],
        check=True,
        env={**os.environ, **OFFLINE},
    )


class Clients:
    def __init__(
        self,
        work: Path,
        workload: Workload,
        guidellm: Path | None,
        pin: list[str] | None = None,
        tokenizer_python: Path | None = None,
    ) -> None:
        self.work = work
        self.workload = workload
        self.guidellm = guidellm
        self.pin = pin or []  # a prefix for every client's argv (taskset -c N)
        self.tokenizer = work / "tokenizer"
        python = guidellm.parent / "python" if guidellm is not None else tokenizer_python
        if python is not None:
            build_tokenizer(python, self.tokenizer)

    def tunelab(
        self, url: str, concurrency: int, requests: int, tag: str
    ) -> tuple[dict[str, Any], Measured]:
        files = BenchFiles(self.work / f"tunelab-{tag}")
        files.workdir.mkdir(parents=True, exist_ok=True)
        config = BenchConfig(
            url=url,
            model="sim",
            concurrency=(concurrency,),
            requests=requests,
            input_len=self.workload.input_len,
            output_len=self.workload.output_len,
            request_timeout_s=300,
        ).with_preset()
        files.config.write_text(json.dumps(config.to_dict()))
        run = run_measured(bench_argv(files), files.log, pin=self.pin)
        point: dict[str, Any] = json.loads(files.result.read_text())["points"][0]
        return point, run

    def run_guidellm(
        self, url: str, concurrency: int, requests: int, tag: str
    ) -> tuple[dict[str, Any], Measured]:
        if self.guidellm is None:
            raise RuntimeError("guidellm not configured")
        out = self.work / f"guidellm-{tag}.json"
        argv = [
            str(self.guidellm), "run",
            "--backend",
            f"kind=openai_http,target={url},model={self.tokenizer},request_format=/v1/completions",
            "--profile", f"kind=concurrent,streams={concurrency}",
            "--constraint", f"kind=max_requests,count={requests}",
            "--tokenizer", "kind=hf_auto",
            "--data",
            (
                f"kind=synthetic_text,prompt_tokens={self.workload.input_len},"
                f"output_tokens={self.workload.output_len}"
            ),
            "--output", f"kind=json,path={out}",
            "--disable-console-interactive",
        ]  # fmt: skip
        run = run_measured(argv, self.work / f"guidellm-{tag}.log", OFFLINE, self.pin)
        bench: dict[str, Any] = json.loads(out.read_text())["benchmarks"][0]
        return bench, run


def measure(clients: Clients, client: str, concurrency: int, requests: int) -> Outcome:
    wl = clients.workload
    args = ["--ttft-ms", str(wl.ttft_ms), "--itl-ms", str(wl.itl_ms), "--model", "sim"]
    tag = f"c{concurrency}-r{requests}"
    outcome = Outcome(client, concurrency, requests)
    with SimulatorProcess(args, clients.work / f"sim-{client}-{tag}.log") as sim:
        if client == "tunelab":
            point, run = clients.tunelab(sim.url, concurrency, requests, tag)
            outcome.completed = point["completed"]
            outcome.ttft_ms = point["mean_ttft_ms"]
            outcome.tpot_ms = point["mean_tpot_ms"]
            outcome.output_tps = point["output_throughput"]
            if point["client_saturated"]:
                outcome.note = "flagged client_saturated: " + "; ".join(
                    point["client_check"]["reasons"]
                )
        else:
            bench, run = clients.run_guidellm(sim.url, concurrency, requests, tag)
            metrics = bench["metrics"]
            outcome.completed = metrics["request_totals"]["successful"]
            outcome.ttft_ms = metrics["time_to_first_token_ms"]["successful"]["mean"]
            outcome.tpot_ms = metrics["inter_token_latency_ms"]["successful"]["mean"]
            tokens = metrics["output_token_count"]["successful"]["total_sum"]
            outcome.output_tps = tokens / bench["duration"] if bench["duration"] else 0.0
        outcome.sim_lateness = sim_stats(sim.url)["write_lateness"]
    outcome.chunks = outcome.completed * wl.output_len
    outcome.cpu_s = run.cpu_s
    outcome.wall_s = run.wall_s
    return outcome


def measure_pair(clients: Clients, client: str, concurrency: int, requests: int) -> Outcome:
    """Runs of R and 2R requests: accuracy from the larger, CPU per chunk from the difference."""
    small = measure(clients, client, concurrency, requests)
    large = measure(clients, client, concurrency, 2 * requests)
    extra_chunks = large.chunks - small.chunks
    if extra_chunks > 0:
        large.marginal_cpu_per_m = (large.cpu_s - small.cpu_s) / extra_chunks * 1e6
    return large


def table(outcomes: list[Outcome], workload: Workload) -> str:
    lines = [
        (
            "| client | C | ok/sent | TTFT err ms | TPOT err ms | TPOT err % | tok/s vs steady "
            "truth | CPU s / 10^6 chunks | CPU s, whole run | sim write lateness mean / p99 ms |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        tpot_err = o.tpot_ms - workload.itl_ms
        ratio = o.output_tps / workload.steady_tps(o.concurrency)
        late = o.sim_lateness
        p99 = late.get("p99_ms", 0.0)
        p99_text = "≥ 100" if p99 >= 100.0 else f"{p99:.2f}"
        marginal = f"{o.marginal_cpu_per_m:,.0f}" if o.marginal_cpu_per_m > 0 else "n/m"
        lines.append(
            f"| {o.client} | {o.concurrency} | {o.completed}/{o.requests} | "
            f"{o.ttft_ms - workload.ttft_ms:+.2f} | {tpot_err:+.3f} | "
            f"{100 * tpot_err / workload.itl_ms:+.2f} | {100 * ratio:.1f} % | "
            f"{marginal} | {o.cpu_s:.1f} | {late.get('mean_ms', 0):.2f} / {p99_text} |"
        )
    return "\n".join(lines)


def render(
    args: argparse.Namespace,
    workload: Workload,
    load_before: tuple[float, float, float],
    outcomes: list[Outcome],
) -> str:
    setup = (
        f"Simulator truth: TTFT {workload.ttft_ms:g} ms, D = {workload.itl_ms:g} ms per chunk "
        f"(one token per chunk), {workload.output_len} output tokens, {workload.input_len}-token "
        f"prompts, /v1/completions, closed loop of R = max({args.waves}·C, {args.min_requests}) "
        "requests and of 2R (accuracy from the 2R run), no warm-up."
    )
    machine = (
        f"Machine: {os.cpu_count()} cores, {platform.platform()}, Python "
        f"{platform.python_version()}; load average before {load_before[0]:.2f}, after "
        f"{os.getloadavg()[0]:.2f}. Client and simulator share the cores."
    )
    legend = (
        "TTFT/TPOT err: client mean minus truth. TPOT is (E2E - TTFT)/(N - 1) per request "
        "(guidellm calls it inter_token_latency). tok/s vs steady truth: achieved output "
        "throughput over C·N/(TTFT + (N-1)·D); a closed loop of synchronous waves reaches it "
        "only when every stage keeps up. CPU per 10^6 chunks: (CPU of the 2R run - CPU of the R "
        "run) / extra chunks; n/m = not measurable, the difference was below the run-to-run "
        "variation of the client's start-up. Simulator lateness is binned up to 100 ms."
    )
    notes = [f"- {o.client} c={o.concurrency}: {o.note}" for o in outcomes if o.note]
    parts = [
        "# Client accuracy and overhead (tunelab vs guidellm 0.8.1)",
        setup,
        machine,
        table(outcomes, workload),
        legend,
    ]
    return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="1,64,256,1024")
    p.add_argument("--ttft-ms", type=float, default=300.0)
    p.add_argument("--itl-ms", type=float, default=97.0)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--waves", type=int, default=1, help="R = waves x C; runs of R and 2R")
    p.add_argument("--min-requests", type=int, default=2)
    p.add_argument("--guidellm", type=Path, default=REPO / ".venv-guidellm" / "bin" / "guidellm")
    p.add_argument("--skip-guidellm", action="store_true")
    p.add_argument("--out", type=Path, help="write the Markdown report here")
    args = p.parse_args()
    workload = Workload(args.ttft_ms, args.itl_ms, args.input_len, args.output_len)
    guidellm = None if args.skip_guidellm else args.guidellm
    if guidellm is not None and not guidellm.exists():
        print(f"no guidellm at {guidellm}; pass --skip-guidellm or install it", file=sys.stderr)
        return 2
    names = ["tunelab"] + ([] if guidellm is None else ["guidellm"])
    load_before = os.getloadavg()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="client-accuracy-") as tmp:
        clients = Clients(Path(tmp), workload, guidellm)
        for c in (int(x) for x in args.concurrency.split(",")):
            requests = max(args.waves * c, args.min_requests)
            for name in names:
                outcome = measure_pair(clients, name, c, requests)
                print(f"{name} c={c}: {outcome}", file=sys.stderr, flush=True)
                outcomes.append(outcome)
    report = render(args, workload, load_before, outcomes)
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
