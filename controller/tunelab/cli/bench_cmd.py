"""``tunelab bench`` (the built-in load generator, from any machine) and ``tunelab sim-server``.

The load generator runs as a child process (``python -m tunelab.bench``); this process only
draws its progress from the progress file, so terminal drawing never delays a timestamp.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.cli.bench_vllm import (
    add_vllm_arguments,
    asked_prompts,
    vllm_mode,
    vllm_result_path,
    vllm_settings,
)
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    is_terminal,
    print_json,
)
from tunelab.common.boundedhttp import HttpFailure, get
from tunelab.common.durations import parse_duration

if TYPE_CHECKING:  # the load generator is imported by the handlers only (see cli.main)
    from tunelab.bench.config import BenchConfig
    from tunelab.bench.launcher import BenchFiles

POLL_SECONDS = 0.2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # SIGTERM, as a shell reports it (after the result is written)
STOP_GRACE_S = 30.0  # a child that has not stopped this long after SIGTERM is killed
_FLAGS = {
    "request_rate": "--rate",
    "rates": "--rate",
    "think_time_s": "--think-time",
    "trace_timed": "--no-trace-timing",
    "duration_seconds": "--duration",
    "request_timeout_s": "--timeout",
    "concurrency": "--concurrency",
    "profile_seconds": "--profile",
    "warmup_seconds": "--warmup-time",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark an OpenAI-compatible server (throughput, TTFT, TPOT, ITL)",
        description="Run the built-in load generator against URL and print a summary per point. "
        "Also takes vllm bench serve's flags with vLLM's meanings (docs/workloads.md).",
        allow_abbrev=False,  # a vLLM flag must never be taken for a prefix of one of ours
    )
    p.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--model", default="", help="model id sent in requests (default: the first of /v1/models)"
    )
    p.add_argument(
        "--tokenizer",
        default="",
        help="a local tokenizer.json or its folder: prompts of exactly --input-len tokens at "
        "the server (random: its special tokens included, as vLLM's); default: random words, "
        "about one token each (approximate)",
    )
    p.add_argument(
        "--api",
        choices=("completions", "chat"),
        default="completions",
        help="OpenAI endpoint: /v1/completions or /v1/chat/completions (default completions)",
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="closed loop: comma-separated list, e.g. 1,256,1024")
    load.add_argument(
        "--rate", help="open loop: requests per second, or a comma-separated list (one point each)"
    )
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape (1 = Poisson)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--requests", type=int, default=0, help="requests per point")
    size.add_argument("--duration", help="time per point, e.g. 60s or 2m")
    p.add_argument(
        "--input-len",
        type=int,
        default=0,
        metavar="I",
        help="prompt length in tokens, >= 1 (required unless --preset decode)",
    )
    p.add_argument(
        "--output-len",
        type=int,
        default=0,
        metavar="O",
        help="max_tokens per request, >= 1 (required unless --preset decode)",
    )
    p.add_argument("--range-ratio", type=float, default=0.0, help="lengths in [L(1-r), L(1+r)]")
    p.add_argument("--warmup", type=int, default=0, help="warm-up requests per point (excluded)")
    p.add_argument("--warmup-time", help="warm-up per point by time, e.g. 10s (replaces --warmup)")
    p.add_argument(
        "--profile",
        nargs="?",
        const="0s",
        metavar="WINDOW",
        help="call the server's profiler around a window of --profile-point (e.g. 5s; alone: "
        "the whole point); a failure is a warning (docs/profiles.md)",
    )
    p.add_argument("--profile-point", type=int, default=0, help="0-based point to profile (0)")
    p.add_argument("--profile-requests", type=int, default=0, help="window of N requests instead")
    p.add_argument("--profile-start-url", default="/start_profile", help="path or URL (vLLM's)")
    p.add_argument("--profile-stop-url", default="/stop_profile", help="path or URL (vLLM's)")
    p.add_argument(
        "--reset-cache-url",
        default="",
        help="POSTed before each point, e.g. /reset_prefix_cache (vLLM, dev mode) or /flush_cache",
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="let the model stop at EOS (default: ignored)",
    )
    p.add_argument("--temperature", type=float, help="sent in every request (default 0)")
    p.add_argument(
        "--vllm-defaults",
        action="store_true",
        help="vllm bench serve's sampling defaults: no temperature sent (the server's default), "
        "EOS not ignored",
    )
    p.add_argument(
        "--save-detailed",
        action="store_true",
        help="add vLLM's per-request arrays (ttfts, itls, latencies, ...) to the result",
    )
    p.add_argument("--slo-ttft-ms", type=float, default=0.0, help="goodput: TTFT limit")
    p.add_argument("--slo-tpot-ms", type=float, default=0.0, help="goodput: TPOT limit")
    p.add_argument("--seed", type=int, default=0, help="prompts depend only on the seed (0)")
    p.add_argument("--preset", choices=("decode",), help="decode: one stream, long output")
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds without a byte before a request fails"
    )
    p.add_argument("--label", default="", help="free text stored in the result")
    p.add_argument("--json", action="store_true", help="print the result document as JSON")
    p.add_argument(
        "--out", type=Path, help="write the result JSON here (requests beside it, .jsonl)"
    )
    add_dataset_arguments(p)
    add_vllm_arguments(p)
    p.set_defaults(handler=bench)

    s = sub.add_parser(
        "sim-server",
        help="run an inference-server simulator with exact timing (no GPU needed)",
        description="An OpenAI-compatible server that streams chunk j at arrival + TTFT + j*ITL.",
    )
    from tunelab.bench.simulator.options import add_sim_arguments  # argparse only

    add_sim_arguments(s)
    s.set_defaults(handler=sim_server)


def add_dataset_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("datasets and arrivals (docs/workloads.md)")
    g.add_argument(
        "--dataset",
        choices=("random", "shared-prefix", "multi-turn", "file", "trace"),
        help="what each request asks for (default random)",
    )
    for side in ("input", "output"):
        g.add_argument(f"--{side}-dist", choices=("uniform", "lognormal"), help="default uniform")
        g.add_argument(
            f"--{side}-sigma", type=float, help="lognormal shape (mean stays the length)"
        )
    g.add_argument("--output-range-ratio", type=float, help="default: the same as --range-ratio")
    g.add_argument("--prefix-len", type=int, help="shared prefix tokens (random, shared-prefix)")
    g.add_argument("--prefix-groups", type=int, help="shared-prefix: distinct prefixes (10)")
    g.add_argument("--turns", type=int, help="multi-turn: turns per conversation (4)")
    g.add_argument("--think-time", help="multi-turn: pause after each answer, e.g. 2s")
    g.add_argument(
        "--file-format", choices=("auto", "sharegpt", "chat", "jsonl"), help="default: by content"
    )
    g.add_argument("--file-output-len", type=int, help="file: max_tokens for every prompt")
    g.add_argument("--trace-block-size", type=int, help="trace: tokens per hash id (512)")
    g.add_argument("--trace-sec-multiplier", type=float, help="trace: seconds per unit")
    g.add_argument("--no-trace-timing", action="store_true", help="trace: lengths only")
    g.add_argument(
        "--trace-long-schedule", action="store_true", help="trace: replay over a day as timed"
    )
    g.add_argument("--dataset-sha256", help="refuse a dataset file whose content differs")
    g.add_argument("--ramp", choices=("linear", "exponential"), help="the rate rises")
    g.add_argument("--ramp-start-rate", type=float, help="requests/s at the start of a ramp")
    g.add_argument("--ramp-end-rate", type=float, help="requests/s at its end")


def _native_dataset(args: argparse.Namespace) -> dict[str, Any]:
    """The dataset/arrival flags that were given, as BenchConfig keyword arguments."""
    names = {
        "dataset": "dataset", "input_dist": "input_dist", "output_dist": "output_dist",
        "input_sigma": "input_sigma", "output_sigma": "output_sigma",
        "output_range_ratio": "output_range_ratio", "prefix_len": "prefix_len",
        "prefix_groups": "prefix_groups", "turns": "turns", "file_format": "file_format",
        "file_output_len": "file_output_len", "trace_block_size": "trace_block_size",
        "trace_sec_multiplier": "trace_sec_multiplier", "dataset_sha256": "dataset_sha256",
        "ramp": "ramp", "ramp_start_rate": "ramp_start_rate", "ramp_end_rate": "ramp_end_rate",
        "dataset_path": "dataset_path", "max_concurrency": "max_concurrency",
    }  # fmt: skip
    out = {
        key: getattr(args, dest)
        for dest, key in names.items()
        if getattr(args, dest, None) is not None
    }
    if args.think_time:
        try:
            out["think_time_s"] = parse_duration(args.think_time)
        except ValueError as exc:
            raise CliError(f"--think-time: {exc}", EXIT_USAGE) from None
    if args.no_trace_timing:
        out["trace_timed"] = False
    if args.trace_long_schedule:
        out["trace_long_schedule"] = True
    return out


def sim_server(args: argparse.Namespace) -> int:
    from tunelab.bench.simulator.app import run as run_simulator
    from tunelab.bench.simulator.options import settings_from_args

    return run_simulator(settings_from_args(args))


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    from tunelab.bench.config import BenchConfig, BenchConfigError
    from tunelab.bench.tokens import hub_cache_tokenizer

    args.temperature_given = args.temperature is not None
    # a timed trace brings its own load: --max-concurrency then caps it, as docs/workloads.md says
    native_load = bool(args.concurrency or args.rate or args.ramp or args.dataset == "trace")
    vllm = vllm_mode(args) or (args.max_concurrency is not None and not native_load)
    common: dict[str, Any] = {
        "model": args.model,
        "tokenizer": args.tokenizer,
        "save_detailed": args.save_detailed,
        "label": args.label,
        "request_timeout_s": args.timeout,
        "burstiness": args.burstiness,
        "temperature": args.temperature or 0.0,
        "seed": args.seed,
    }
    if vllm:
        for flag, given in (("--concurrency", args.concurrency), ("--rate", args.rate),
                            ("--requests", args.requests), ("--duration", args.duration),
                            ("--preset", args.preset), ("--dataset", args.dataset)):  # fmt: skip
            if given:
                raise CliError(
                    f"{flag}: not with vllm bench serve's flags (use --max-concurrency, "
                    "--request-rate, --num-prompts, --dataset-name)",
                    EXIT_USAGE,
                )
        settings = {**common, **vllm_settings(args), **_profiling(args)}
    else:
        if not args.url:
            raise CliError("--url (or vLLM's --base-url / --host / --port) is required", EXIT_USAGE)
        _check_required(args)
        settings = {**common, **_native_settings(args), **_native_dataset(args)}
    tokenizer = settings.get("tokenizer")
    if tokenizer and not Path(tokenizer).exists():  # a hub id: its file in the local HF cache
        cached = hub_cache_tokenizer(tokenizer, os.environ, Path.home())
        settings["tokenizer"] = str(cached) if cached is not None else tokenizer
    for key in ("dataset_path", "tokenizer"):  # the generator runs in a folder of its own
        if settings.get(key):
            settings[key] = str(Path(settings[key]).resolve())
    try:
        return BenchConfig(**settings).with_preset()
    except BenchConfigError as exc:
        name = exc.field.split("[", 1)[0]
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        problem = exc.problem
        for field, option in _FLAGS.items():  # the flags' names, not the config's fields
            problem = problem.replace(field, option)
        raise CliError(f"{flag}: {problem}", EXIT_USAGE) from None


def _check_required(args: argparse.Namespace) -> None:
    """What is missing is said as missing (not "must be >= 1" for a flag never given); a preset
    fills in what it sets, a ramp or a timed trace brings its own load, a dataset other than
    random its own lengths."""
    if args.preset:
        return
    if args.concurrency and args.rate:
        raise CliError("give --concurrency or --rate, not both", EXIT_USAGE)
    trace = getattr(args, "dataset", None) == "trace"
    if not (args.concurrency or args.rate or args.ramp or trace):
        raise CliError(
            "give --concurrency N[,N...] (closed loop) or --rate R[,R...] (open loop, requests/s)",
            EXIT_USAGE,
        )
    if getattr(args, "dataset", None) not in (None, "random"):
        return
    for flag, value, what in (
        ("--input-len", args.input_len, "prompt length in tokens"),
        ("--output-len", args.output_len, "max_tokens per request"),
    ):
        if not value:
            raise CliError(
                f"{flag} is required ({what}, e.g. {flag} 128), unless --preset decode",
                EXIT_USAGE,
            )


def _native_settings(args: argparse.Namespace) -> dict[str, Any]:
    try:
        concurrency = tuple(int(c) for c in args.concurrency.split(",")) if args.concurrency else ()
    except ValueError:
        raise CliError(
            f"--concurrency: expected integers like 1,256,1024, got {args.concurrency!r}",
            EXIT_USAGE,
        ) from None
    try:
        rates = tuple(float(r) for r in args.rate.split(",")) if args.rate else ()
    except ValueError:
        raise CliError(
            f"--rate: expected numbers like 1,2.5,10, got {args.rate!r}", EXIT_USAGE
        ) from None
    seconds = {
        "--duration": _seconds("--duration", args.duration),
        "--warmup-time": _seconds("--warmup-time", args.warmup_time),
    }
    return {
        "url": args.url,
        "api": args.api,
        "concurrency": concurrency,
        "rates": rates,
        "requests": args.requests,
        "duration_seconds": seconds["--duration"],
        "input_len": args.input_len,
        "output_len": args.output_len,
        "range_ratio": args.range_ratio,
        "warmup": args.warmup,
        "ignore_eos": not (args.no_ignore_eos or args.vllm_defaults),
        "send_temperature": not args.vllm_defaults,
        "slo_ttft_ms": args.slo_ttft_ms,
        "slo_tpot_ms": args.slo_tpot_ms,
        "preset": args.preset or "",
        "warmup_seconds": seconds["--warmup-time"],
        "reset_cache_url": args.reset_cache_url,
        **_profiling(args),
    }


def _seconds(flag: str, value: str | None) -> float:
    try:
        return parse_duration(value) if value else 0.0
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", EXIT_USAGE) from None


def _profiling(args: argparse.Namespace) -> dict[str, Any]:
    """``--profile [WINDOW]`` (also vllm bench serve's bare ``--profile``): the server's
    profiler around a window of one point."""
    if args.profile is None:
        return {}
    return {
        "profile_point": args.profile_point,
        "profile_seconds": _seconds("--profile", args.profile),
        "profile_requests": args.profile_requests,
        "profile_start_url": args.profile_start_url,
        "profile_stop_url": args.profile_stop_url,
    }


def preflight(config: BenchConfig) -> BenchConfig:
    """Fail fast, with exit code 3, when nothing answers at the URL; fill the model from
    ``/v1/models`` when none was given, and check the tokenizer loads."""
    from dataclasses import replace

    from tunelab.bench.datasets import Dataset
    from tunelab.bench.models import ModelLookupError, first_model_id
    from tunelab.bench.promptfiles import DatasetFileError
    from tunelab.bench.tokens import TokenizerError, TokenPrompts

    tokens = None
    if config.tokenizer:
        try:
            tokens = TokenPrompts(config.tokenizer)
        except TokenizerError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    if config.dataset_path:  # a file that is unusable is refused before anything starts
        try:
            data = Dataset(config, tokens)
        except DatasetFileError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        if config.dataset_sha256 and data.sha256 != config.dataset_sha256.lower():
            raise CliError(
                f"--dataset-sha256: {config.dataset_path} has sha256 {data.sha256}", EXIT_USAGE
            )
    if config.model:
        url = config.url.rstrip("/").removesuffix("/v1") + "/v1/models"
        try:  # any status: it answers, and the benchmark will say how
            get(url, seconds=10, max_body=0)
            return config
        except HttpFailure as exc:
            if exc.protocol:
                raise _not_http(config, exc) from None
            raise CliError(f"cannot reach {config.url}: {exc}", EXIT_UNAVAILABLE) from None
    try:
        return replace(config, model=first_model_id(config.url))
    except HttpFailure as exc:  # BadStatusLine & co: something else is listening
        raise _not_http(config, exc) from None
    except ModelLookupError as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE if exc.unreachable else EXIT_USAGE) from None


def _not_http(config: BenchConfig, exc: HttpFailure) -> CliError:
    return CliError(
        f"{config.url} does not speak HTTP ({exc.kind}): is it the server's port?",
        EXIT_UNAVAILABLE,
    )


class Terminated(Exception):
    """SIGTERM reached ``tunelab bench``: stop like Ctrl-C (the child keeps what finished)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def bench(args: argparse.Namespace) -> int:
    from tunelab.bench.console import render_summary
    from tunelab.bench.launcher import BenchFiles

    config = preflight(config_from_args(args))
    workdir = Path(tempfile.mkdtemp(prefix="tunelab-bench-"))
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        files = BenchFiles(workdir)
        show = is_terminal() and not args.json and not getattr(args, "disable_tqdm", None)
        document, stopped_by = _run(config, files, show=show)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files.result, args.out)
            shutil.copyfile(files.requests, args.out.with_suffix(".requests.jsonl"))
        saved = vllm_result_path(args, document)
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            kept = vllm_result(document, asked_prompts(args))
            saved.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print_json(document)
    else:
        render_summary(document, decode=config.preset == "decode")
        if args.out is not None:
            print(f"result: {args.out}  requests: {args.out.with_suffix('.requests.jsonl')}")
        if saved is not None:
            print(f"vllm result: {saved}")
    if stopped_by == "SIGINT":
        return EXIT_INTERRUPTED
    if stopped_by == "SIGTERM":
        return EXIT_TERMINATED
    points = document.get("points", [])
    ok = document.get("status") == "completed" and all(p["completed"] > 0 for p in points)
    return EXIT_OK if ok else EXIT_FAILED


def vllm_result(document: dict[str, Any], asked: int | None = None) -> dict[str, Any]:
    """What ``vllm bench serve --save-result`` writes: one point's flat summary (the first and
    only point of a vLLM-mode run), with the dataset's identity beside it; ``num_prompts`` is
    what ``--num-prompts`` asked (``asked``), as in vLLM's file, beside ``requests_planned``
    (what the dataset made of it) and ``completed`` + ``failed`` (what was sent)."""
    points = document.get("points", [])
    if len(points) != 1:
        return document
    point = {**points[0], **({"num_prompts": asked} if asked is not None else {})}
    return {**point, "dataset": document.get("dataset"), "status": document.get("status")}


def _run(config: BenchConfig, files: BenchFiles, show: bool) -> tuple[dict[str, Any], str]:
    """Run the bench process to its end; the document and what stopped it ("" when nothing
    did, else "SIGINT" or "SIGTERM"). Ctrl-C reaches the child through the terminal's process
    group, a signal sent to us alone does not: both are passed on, through a pidfd of the child,
    and a child still running ``STOP_GRACE_S`` later is killed."""
    from tunelab.bench.console import BenchProgressView
    from tunelab.bench.launcher import spawn
    from tunelab.bench.progress import ProgressReader

    proc = spawn(config, files, new_session=False)  # Ctrl-C reaches it too; it writes a partial
    pidfd = _pidfd(proc.pid)  # ours until we reap it: the pid cannot be reused before then
    reader = ProgressReader(files.progress)
    stopped_by = ""
    deadline = math.inf
    try:
        with BenchProgressView(show, len(config.points())) as view:
            while True:
                try:
                    code = proc.poll()
                    view.update(reader.poll())
                    if code is not None:
                        break
                    if time.monotonic() > deadline:
                        _signal_child(proc, pidfd, signal.SIGKILL)
                        deadline = math.inf
                    time.sleep(POLL_SECONDS)
                except KeyboardInterrupt:
                    # a terminal's Ctrl-C reached the child too, `timeout -s INT` or a supervisor
                    # only us (issue 36.6): pass it on (the child stops at the first it gets)
                    stopped_by = stopped_by or "SIGINT"
                    _signal_child(proc, pidfd, signal.SIGINT)
                    deadline = min(deadline, time.monotonic() + STOP_GRACE_S)
                except Terminated:
                    stopped_by = stopped_by or "SIGTERM"
                    _signal_child(proc, pidfd, signal.SIGTERM)
                    deadline = time.monotonic() + STOP_GRACE_S
    finally:
        if pidfd is not None:
            os.close(pidfd)
    state = reader.poll()
    if not files.result.exists():
        detail = state.error or files.log_tail(800) or f"exit status {proc.returncode}"
        raise CliError(f"the load generator failed: {detail}", EXIT_FAILED)
    document: dict[str, Any] = json.loads(files.result.read_text(encoding="utf-8"))
    return document, stopped_by


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:  # an old kernel: Popen's own send_signal checks it has not reaped the child
        return None


def _signal_child(proc: subprocess.Popen[bytes], pidfd: int | None, sig: signal.Signals) -> None:
    if proc.poll() is not None:
        return
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:
        return
