"""``tunelab bench`` (the built-in load generator, from any machine) and ``tunelab sim-server``.

The load generator runs as a child process (``python -m tunelab.bench``); this process only
draws its progress from the progress file, so terminal drawing never delays a timestamp.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    is_terminal,
    print_json,
)
from tunelab.common.durations import parse_duration

if TYPE_CHECKING:  # the load generator is imported by the handlers only (see cli.main)
    from tunelab.bench.config import BenchConfig
    from tunelab.bench.launcher import BenchFiles

POLL_SECONDS = 0.2
EXIT_INTERRUPTED = 130
_FLAGS = {
    "request_rate": "--rate",
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
        description="Run the built-in load generator against URL and print a summary per point.",
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--model", default="", help="model id sent in requests (default: the first of /v1/models)"
    )
    p.add_argument(
        "--tokenizer",
        default="",
        help="tokenizer.json or its folder: prompts of exactly --input-len tokens (needs the "
        "tokenizers library); default: random words, about one token each",
    )
    p.add_argument(
        "--api",
        choices=("completions", "chat"),
        default="completions",
        help="OpenAI endpoint: /v1/completions or /v1/chat/completions (default completions)",
    )
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", help="closed loop: comma-separated list, e.g. 1,256,1024")
    load.add_argument("--rate", type=float, default=0.0, help="open loop: requests per second")
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
    p.add_argument("--temperature", type=float, default=0.0, help="sent in every request (0)")
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
    p.set_defaults(handler=bench)

    s = sub.add_parser(
        "sim-server",
        help="run an inference-server simulator with exact timing (no GPU needed)",
        description="An OpenAI-compatible server that streams chunk j at arrival + TTFT + j*ITL.",
    )
    from tunelab.bench.simulator.options import add_sim_arguments  # argparse only

    add_sim_arguments(s)
    s.set_defaults(handler=sim_server)


def sim_server(args: argparse.Namespace) -> int:
    from tunelab.bench.simulator.app import run as run_simulator
    from tunelab.bench.simulator.options import settings_from_args

    return run_simulator(settings_from_args(args))


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    from tunelab.bench.config import BenchConfig, BenchConfigError

    try:
        concurrency = tuple(int(c) for c in args.concurrency.split(",")) if args.concurrency else ()
    except ValueError:
        raise CliError(
            f"--concurrency: expected integers like 1,256,1024, got {args.concurrency!r}",
            EXIT_USAGE,
        ) from None
    seconds: dict[str, float] = {}
    for flag, value in (("--duration", args.duration), ("--warmup-time", args.warmup_time),
                        ("--profile", args.profile)):  # fmt: skip
        try:
            seconds[flag] = parse_duration(value) if value else 0.0
        except ValueError as exc:
            raise CliError(f"{flag}: {exc}", EXIT_USAGE) from None
    duration = seconds["--duration"]
    profiling: dict[str, Any] = {}
    if args.profile is not None:
        profiling = {
            "profile_point": args.profile_point,
            "profile_seconds": seconds["--profile"],
            "profile_requests": args.profile_requests,
            "profile_start_url": args.profile_start_url,
            "profile_stop_url": args.profile_stop_url,
        }
    try:
        return BenchConfig(
            url=args.url,
            model=args.model,
            api=args.api,
            concurrency=concurrency,
            request_rate=args.rate,
            burstiness=args.burstiness,
            requests=args.requests,
            duration_seconds=duration,
            input_len=args.input_len,
            output_len=args.output_len,
            range_ratio=args.range_ratio,
            warmup=args.warmup,
            ignore_eos=not (args.no_ignore_eos or args.vllm_defaults),
            temperature=args.temperature,
            send_temperature=not args.vllm_defaults,
            tokenizer=args.tokenizer,
            save_detailed=args.save_detailed,
            slo_ttft_ms=args.slo_ttft_ms,
            slo_tpot_ms=args.slo_tpot_ms,
            seed=args.seed,
            preset=args.preset or "",
            label=args.label,
            request_timeout_s=args.timeout,
            warmup_seconds=seconds["--warmup-time"],
            reset_cache_url=args.reset_cache_url,
            **profiling,
        ).with_preset()
    except BenchConfigError as exc:
        name = exc.field.split("[", 1)[0]
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        raise CliError(f"{flag}: {exc.problem}", EXIT_USAGE) from None


def preflight(config: BenchConfig) -> BenchConfig:
    """Fail fast, with exit code 3, when nothing answers at the URL; fill the model from
    ``/v1/models`` when none was given, and check the tokenizer loads."""
    from dataclasses import replace

    from tunelab.bench.models import ModelLookupError, first_model_id
    from tunelab.bench.tokens import TokenizerError, TokenPrompts

    if config.tokenizer:
        try:
            TokenPrompts(config.tokenizer)
        except TokenizerError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    if config.model:
        url = config.url.rstrip("/").removesuffix("/v1") + "/v1/models"
        try:
            with urllib.request.urlopen(url, timeout=10):  # noqa: S310 - an http(s) URL, validated
                return config
        except urllib.error.HTTPError:
            return config  # it answers; the benchmark will say how
        except http.client.HTTPException as exc:
            raise _not_http(config, exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError(f"cannot reach {config.url}: {reason}", EXIT_UNAVAILABLE) from None
    try:
        return replace(config, model=first_model_id(config.url))
    except http.client.HTTPException as exc:  # BadStatusLine & co: something else is listening
        raise _not_http(config, exc) from None
    except ModelLookupError as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE if exc.unreachable else EXIT_USAGE) from None


def _not_http(config: BenchConfig, exc: Exception) -> CliError:
    return CliError(
        f"{config.url} does not speak HTTP ({type(exc).__name__}): is it the server's port?",
        EXIT_UNAVAILABLE,
    )


def bench(args: argparse.Namespace) -> int:
    from tunelab.bench.console import render_summary
    from tunelab.bench.launcher import BenchFiles

    config = preflight(config_from_args(args))
    workdir = Path(tempfile.mkdtemp(prefix="tunelab-bench-"))
    try:
        files = BenchFiles(workdir)
        document, interrupted = _run(config, files, show=is_terminal() and not args.json)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files.result, args.out)
            shutil.copyfile(files.requests, args.out.with_suffix(".requests.jsonl"))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print_json(document)
    else:
        render_summary(document, decode=config.preset == "decode")
        if args.out is not None:
            print(f"result: {args.out}  requests: {args.out.with_suffix('.requests.jsonl')}")
    if interrupted:
        return EXIT_INTERRUPTED
    points = document.get("points", [])
    ok = document.get("status") == "completed" and all(p["completed"] > 0 for p in points)
    return EXIT_OK if ok else EXIT_FAILED


def _run(config: BenchConfig, files: BenchFiles, show: bool) -> tuple[dict[str, Any], bool]:
    from tunelab.bench.console import BenchProgressView
    from tunelab.bench.launcher import spawn
    from tunelab.bench.progress import ProgressReader

    """Run the bench process to its end; the document and whether Ctrl-C stopped it."""
    proc = spawn(config, files, new_session=False)  # Ctrl-C reaches it too; it writes a partial
    reader = ProgressReader(files.progress)
    interrupted = False
    with BenchProgressView(show, len(config.points())) as view:
        while True:
            try:
                code = proc.poll()
                view.update(reader.poll())
                if code is not None:
                    break
                time.sleep(POLL_SECONDS)
            except KeyboardInterrupt:
                interrupted = True  # the child got SIGINT as well; let it write what it has
    state = reader.poll()
    if not files.result.exists():
        detail = state.error or files.log_tail(800) or f"exit status {proc.returncode}"
        raise CliError(f"the load generator failed: {detail}", EXIT_FAILED)
    document: dict[str, Any] = json.loads(files.result.read_text(encoding="utf-8"))
    return document, interrupted
