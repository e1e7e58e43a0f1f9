"""``vllm bench serve``'s own flags on ``tunelab bench``, with vLLM's meanings.

A user's ``vllm bench serve ...`` line runs as ``tunelab bench ...``. Any vLLM-only flag puts
the command in vLLM mode, where vLLM's defaults hold (``--dataset-name random``, 1024 input and
128 output tokens, 1000 prompts, ``--request-rate inf``, temperature left to the server, EOS
not ignored unless ``--ignore-eos``). Load, as vLLM runs it:

- rate ``inf`` with ``--max-concurrency N``: a closed loop of N over ``--num-prompts``;
- rate ``inf`` without it: every prompt at once (a closed loop as wide as the prompts);
- a finite rate (or a ramp): an open loop, at most N in flight when ``--max-concurrency``;
- ``timed_trace``: the trace's own times (``--self-timed``, its default), at most N in flight.

A vLLM flag tunelab does not support is refused by name (exit 2), never ignored; see
:data:`UNSUPPORTED`. Read from vLLM's ``vllm/benchmarks/serve.py`` and
``vllm/benchmarks/datasets/arg_utils.py``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from tunelab.cli.common import EXIT_USAGE, CliError

VLLM_DATASETS = {
    "random": "random",
    "prefix_repetition": "shared-prefix",
    "sharegpt": "file",
    "custom": "file",
    "timed_trace": "trace",
}
BACKENDS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}
ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
# vllm bench serve flags that tunelab bench refuses by name
UNSUPPORTED = (
    "--header", "--tokenizer-mode", "--use-beam-search", "--logprobs", "--probe-request-rate",
    "--append-result", "--metadata", "--request-id-prefix", "--top-p", "--top-k",
    "--min-p", "--frequency-penalty", "--presence-penalty", "--repetition-penalty",
    "--served-model-name", "--lora-modules", "--lora-assignment", "--ready-check-timeout-sec",
    "--chat-template-kwargs", "--extra-body", "--skip-tokenizer-init", "--insecure",
    "--plot-timeline", "--timeline-itl-thresholds", "--plot-dataset-stats",
    "--trust-remote-code", "--no-stream", "--no-oversample",
    "--disable-shuffle", "--spec-bench-output-len", "--spec-bench-category",
    "--sonnet-input-len", "--sonnet-output-len", "--sonnet-prefix-len",
    "--blazedit-min-distance", "--blazedit-max-distance", "--random-batch-size",
    "--no-reranker", "--random-mm-base-items-per-request",
    "--random-mm-num-mm-items-range-ratio", "--random-mm-limit-mm-per-prompt",
    "--random-mm-bucket-config", "--hf-subset", "--hf-split", "--hf-name", "--hf-output-len",
    "--timed-trace-label-timestamp", "--timed-trace-label-input-length",
    "--timed-trace-label-output-length", "--timed-trace-label-hash-ids",
    "--asr-max-audio-len-sec", "--asr-min-audio-len-sec", "--bfcl-categories",
    "--custom-ensure-client-side-data", "--enable-multimodal-chat",
    "--speed-bench-dataset-subset", "--speed-bench-output-len", "--speed-bench-category",
)  # fmt: skip
# dests of the vLLM-only flags: any of them set (not None) means vLLM mode; --max-concurrency
# is both ours (an open loop's cap) and vLLM's, so it alone means vLLM mode only without --rate
VLLM_ONLY = (
    "base_url", "host", "port", "backend", "endpoint", "dataset_name",
    "num_prompts", "request_rate", "random_input_len", "random_output_len",
    "random_range_ratio", "random_prefix_len", "prefix_repetition_prefix_len",
    "prefix_repetition_suffix_len", "prefix_repetition_num_prefixes",
    "prefix_repetition_output_len", "sharegpt_output_len", "custom_output_len",
    "timed_trace_chunk_hash_size", "timed_trace_sec_multiplier", "self_timed", "ignore_eos",
    "save_result", "result_dir", "result_filename", "percentile_metrics", "metric_percentiles",
    "goodput", "num_warmups", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
    "disable_tqdm", "skip_chat_template",
)  # fmt: skip


class _Refuse(argparse.Action):
    """A vLLM flag tunelab bench refuses, whatever values follow it (add it with nargs="*")."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        raise CliError(
            f"{option}: a vllm bench serve flag that tunelab bench does not support "
            "(refused rather than ignored; see docs/workloads.md)",
            EXIT_USAGE,
        )


def add_vllm_arguments(p: argparse.ArgumentParser) -> None:
    """vLLM's flags, every default None so that setting one is seen (vLLM mode)."""
    g = p.add_argument_group("vllm bench serve flags (vLLM's meanings; see docs/workloads.md)")
    g.add_argument("--base-url", help="server base URL (vLLM's name for --url)")
    g.add_argument("--host", help="with --port, instead of --base-url (default 127.0.0.1)")
    g.add_argument("--port", type=int, help="default 8000")
    g.add_argument("--backend", choices=sorted(BACKENDS), help="openai / vllm: completions")
    g.add_argument("--endpoint", help="/v1/completions (default) or /v1/chat/completions")
    g.add_argument("--dataset-name", help=f"one of {', '.join(VLLM_DATASETS)}")
    g.add_argument("--dataset-path", help="sharegpt / custom / timed_trace file")
    g.add_argument("--num-prompts", type=int, help="requests (default 1000)")
    g.add_argument("--request-rate", type=float, help="requests/s (default inf)")
    g.add_argument("--max-concurrency", type=int, help="requests in flight at most")
    for name, default in (("input", 1024), ("output", 128)):
        g.add_argument(f"--random-{name}-len", type=int, help=f"default {default}")
    g.add_argument(
        "--random-range-ratio",
        metavar="R",
        help='lengths in [L(1-r), L(1+r)]; or \'{"input": 0.2, "output": 0.5}\' for each',
    )
    g.add_argument("--random-prefix-len", type=int, help="a prefix shared by all prompts")
    for name, default in (("prefix", 256), ("suffix", 256), ("num-prefixes", 10), ("output", 128)):
        suffix = "" if name == "num-prefixes" else "-len"
        g.add_argument(f"--prefix-repetition-{name}{suffix}", type=int, help=f"default {default}")
    g.add_argument("--sharegpt-output-len", type=int, help="max_tokens for every prompt")
    g.add_argument(
        "--custom-output-len",
        type=int,
        help="custom: max_tokens (default 256; -1: each row's output_tokens)",
    )
    g.add_argument(
        "--skip-chat-template",
        action="store_true",
        default=None,
        help="custom: send each prompt as it is, not in the server's chat template",
    )
    g.add_argument("--timed-trace-chunk-hash-size", type=int, help="tokens per hash id (16)")
    g.add_argument("--timed-trace-sec-multiplier", type=float, help="seconds per unit (1)")
    g.add_argument(
        "--self-timed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="timed_trace: send at the trace's times (its default)",
    )
    g.add_argument("--ignore-eos", action="store_true", default=None, help="set ignore_eos")
    g.add_argument(
        "--save-result", action="store_true", default=None, help="write vLLM's result JSON"
    )
    g.add_argument("--result-dir", help="where --save-result writes (default .)")
    g.add_argument("--result-filename", help="default {label}-{rate}qps-{model}-{date}.json")
    g.add_argument("--percentile-metrics", help="default ttft,tpot,itl")
    g.add_argument("--metric-percentiles", help='default "99"')
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS", help="ttft:X tpot:Y e2el:Z")
    g.add_argument("--num-warmups", type=int, help="warm-up requests (excluded)")
    g.add_argument("--ramp-up-strategy", choices=("linear", "exponential"), help="rate rises")
    g.add_argument("--ramp-up-start-rps", type=int, help="ramp: first rate")
    g.add_argument("--ramp-up-end-rps", type=int, help="ramp: last rate")
    g.add_argument("--disable-tqdm", action="store_true", default=None, help="no progress bar")
    for flag in UNSUPPORTED:
        p.add_argument(flag, action=_Refuse, nargs="*", help=argparse.SUPPRESS)


def vllm_mode(args: argparse.Namespace) -> bool:
    return any(getattr(args, dest, None) is not None for dest in VLLM_ONLY)


def _usage(flag: str, problem: str) -> CliError:
    return CliError(f"{flag}: {problem}", EXIT_USAGE)


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise _usage(flag, f"expected numbers like 25,50,99, got {text!r}") from None


def range_ratios(text: str | None) -> dict[str, float]:
    """``--random-range-ratio`` as vLLM takes it: one number for the input and output lengths
    both, or a JSON object with ``input`` and ``output`` (vLLM's ``_resolve_range_ratios``)."""
    if text is None:
        return {"range_ratio": 0.0}
    try:
        return {"range_ratio": float(text)}
    except ValueError:
        pass
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        if set(value) != {"input", "output"}:
            raise _usage(
                "--random-range-ratio",
                f"a JSON object needs exactly the keys input and output, got {sorted(value)}",
            )
        both = (value["input"], value["output"])
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in both):
            raise _usage("--random-range-ratio", f"input and output must be numbers: {text}")
        return {"range_ratio": float(both[0]), "output_range_ratio": float(both[1])}
    raise _usage("--random-range-ratio", f"expected a number or a JSON object, got {text!r}")


def vllm_settings(args: argparse.Namespace) -> dict[str, Any]:
    """BenchConfig keyword arguments for a vLLM-mode command line (vLLM's defaults)."""
    name = args.dataset_name or "random"
    if name not in VLLM_DATASETS:
        raise _usage(
            "--dataset-name",
            f"{name!r} is not supported (tunelab bench takes {', '.join(VLLM_DATASETS)})",
        )
    if name == "random" and args.dataset_path:
        raise _usage("--dataset-path", "the random dataset reads no file (as in vLLM)")
    if name != "random" and name != "prefix_repetition" and not args.dataset_path:
        raise _usage("--dataset-path", f"{name} needs a file")
    api = "completions"
    if args.backend:
        api = BACKENDS[args.backend]
    if args.endpoint:
        if args.endpoint not in ENDPOINTS:
            raise _usage("--endpoint", f"must be one of {', '.join(ENDPOINTS)}")
        api = ENDPOINTS[args.endpoint]
    url = args.url or args.base_url or f"http://{args.host or '127.0.0.1'}:{args.port or 8000}"
    n = args.num_prompts if args.num_prompts is not None else 1000
    if n < 1:
        raise _usage("--num-prompts", "must be >= 1")
    cap = args.max_concurrency or 0
    if args.max_concurrency is not None and args.max_concurrency <= 0:
        raise _usage("--max-concurrency", "must be greater than 0")
    rate = args.request_rate if args.request_rate is not None else math.inf
    s: dict[str, Any] = {
        "url": url,
        "api": api,
        "dataset": VLLM_DATASETS[name],
        "seed": args.seed,
        "requests": n,
        "ignore_eos": bool(args.ignore_eos),
        "send_temperature": args.temperature_given,
        "warmup": args.num_warmups or 0,
        "input_len": args.input_len or args.random_input_len or 1024,
        "output_len": args.output_len or args.random_output_len or 128,
        **range_ratios(args.random_range_ratio),
        "prefix_len": args.random_prefix_len or 0,
    }
    if name == "prefix_repetition":
        k = args.prefix_repetition_num_prefixes or 10
        if n < k:
            raise _usage("--num-prompts", f"must be >= --prefix-repetition-num-prefixes ({k})")
        s.update(
            prefix_len=args.prefix_repetition_prefix_len or 256,
            input_len=args.prefix_repetition_suffix_len or 256,
            prefix_groups=k,
            output_len=args.prefix_repetition_output_len or 128,
            requests=k * (n // k),  # vLLM: num_prompts // num_prefixes per prefix
        )
    elif name == "sharegpt":
        # vLLM's ShareGPTDataset drops conversations by length (datasets.vllm_length_valid)
        s.update(dataset_path=args.dataset_path, file_format="sharegpt", file_filter="vllm")
        s["file_output_len"] = args.sharegpt_output_len or 0
    elif name == "custom":
        # vLLM's CustomDataset wraps each prompt in the chat template unless told not to;
        # the server renders it (chattemplate.py), and a server without one gets them raw
        s.update(
            dataset_path=args.dataset_path,
            file_format="jsonl",
            chat_template=not args.skip_chat_template,
        )
        if args.custom_output_len == -1:  # vLLM: each row's own output_tokens
            s.update(file_output_len=0, output_len=0)
        else:
            s["file_output_len"] = args.custom_output_len or 256
    elif name == "timed_trace":
        s.update(
            dataset_path=args.dataset_path,
            trace_block_size=args.timed_trace_chunk_hash_size or 16,
            trace_sec_multiplier=args.timed_trace_sec_multiplier or 1.0,
            trace_timed=args.self_timed is not False,
        )
    if args.ramp_up_strategy:
        if args.request_rate is not None:
            raise _usage("--request-rate", "leave it out with --ramp-up-strategy (as vLLM does)")
        if args.ramp_up_start_rps is None or args.ramp_up_end_rps is None:
            raise _usage("--ramp-up-strategy", "needs --ramp-up-start-rps and --ramp-up-end-rps")
        s.update(
            ramp=args.ramp_up_strategy,
            ramp_start_rate=float(args.ramp_up_start_rps),
            ramp_end_rate=float(args.ramp_up_end_rps),
            max_concurrency=cap,
        )
    elif name == "timed_trace" and s["trace_timed"]:
        s["max_concurrency"] = cap
    elif math.isinf(rate):
        s["concurrency"] = (cap or s["requests"],)
    else:
        s.update(rates=(rate,), max_concurrency=cap)
    if args.metric_percentiles or args.percentile_metrics:
        s["percentiles"] = _floats(args.metric_percentiles or "99", "--metric-percentiles")
        metrics = (args.percentile_metrics or "ttft,tpot,itl").split(",")
        s["percentile_metrics"] = tuple(m.strip() for m in metrics if m.strip())
    for item in args.goodput or ():
        key, _, value = item.partition(":")
        if key not in ("ttft", "tpot", "e2el"):
            raise _usage("--goodput", f"{item!r}: the metric must be ttft, tpot or e2el")
        try:
            s[f"slo_{key}_ms"] = float(value)
        except ValueError:
            raise _usage("--goodput", f"{item!r}: expected KEY:MILLISECONDS") from None
    return s


def vllm_result_path(args: argparse.Namespace, document: dict[str, Any]) -> Path | None:
    """Where ``--save-result`` writes: ``--result-filename``, else vLLM's default name
    (``compute_result_filename``): ``{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json``,
    ``{label}-ramp-up-{strategy}-{start}qps-{end}qps[-concurrency{N}]-{model}-{date}.json`` with
    a ramp; ``-concurrency{N}`` when ``--max-concurrency`` was given."""
    if not (args.save_result or args.result_filename):
        return None
    point = document["points"][0] if document.get("points") else {}
    if args.result_filename:
        name = str(args.result_filename)
    else:
        label = args.label or args.backend or "openai"
        model = str(document["config"].get("model", "")).split("/")[-1]
        cap = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
        date = point.get("date", "")
        if args.ramp_up_strategy:
            name = (
                f"{label}-ramp-up-{args.ramp_up_strategy}-{args.ramp_up_start_rps}qps-"
                f"{args.ramp_up_end_rps}qps{cap}-{model}-{date}.json"
            )
        else:
            rate = float(args.request_rate) if args.request_rate is not None else math.inf
            name = f"{label}-{rate}qps{cap}-{model}-{date}.json"
    return Path(args.result_dir or ".") / name


def asked_prompts(args: argparse.Namespace) -> int:
    """``num_prompts`` as vLLM's result has it: what ``--num-prompts`` asked (1000 by
    default), whatever the dataset made of it (prefix_repetition sends K x (N // K))."""
    return int(args.num_prompts) if args.num_prompts is not None else 1000
