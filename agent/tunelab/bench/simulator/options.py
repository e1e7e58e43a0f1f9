"""The simulator's settings: one frozen dataclass, built from command-line flags.

The same flags serve ``python -m tunelab.bench.simulator`` and ``tunelab sim-server``.
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass

from tunelab.bench.simulator.phases import Phase, parse_phase
from tunelab.bench.simulator.upgrade import read_upgrade

USAGE_MODES = ("continuous", "final", "none")
FAULT_KINDS = ("drop", "hang", "malformed")


@dataclass(frozen=True)
class Fault:
    """A fault applied to every ``every``-th generation request (1 = all of them).

    ``kind`` is an HTTP status ("429", "500", ...), ``drop`` (close the connection mid-stream),
    ``hang`` (read the request, never answer) or ``malformed`` (one broken SSE line mid-stream).
    """

    kind: str
    every: int = 1

    @property
    def status(self) -> int | None:
        return int(self.kind) if self.kind.isdigit() else None

    def applies_to(self, request_number: int) -> bool:
        return request_number % self.every == 0


def parse_fault(text: str) -> Fault:
    """``KIND[:EVERY]``, e.g. ``429``, ``500:3``, ``drop:5``, ``hang``."""
    kind, _, every_text = text.partition(":")
    kind = kind.strip().lower()
    if not (kind in FAULT_KINDS or (kind.isdigit() and 400 <= int(kind) <= 599)):
        raise argparse.ArgumentTypeError(
            "fault kind must be an HTTP status 400-599 or one of "
            f"{', '.join(FAULT_KINDS)}: {text!r}"
        )
    try:
        every = int(every_text) if every_text else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"fault EVERY must be an integer: {text!r}") from None
    if every < 1:
        raise argparse.ArgumentTypeError(f"fault EVERY must be >= 1: {text!r}")
    return Fault(kind, every)


@dataclass(frozen=True)
class SimSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "tunelab-sim"
    startup_seconds: float = 0.0
    shards: int = 83
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    default_max_tokens: int = 16
    eos_after: int = 0  # emit EOS after this many tokens unless ignore_eos; 0 = never
    usage: str = "continuous"
    role_chunk_ms: float = (
        -1.0
    )  # chat: role-only chunk this long after arrival; -1 = with 1st token
    drop_after_chunks: int = 2
    faults: tuple[Fault, ...] = ()
    models_while_loading: bool = True  # SGLang lists the model before /health turns 200
    profiler_config: str = ""  # vLLM's --profiler-config JSON: attaches /start_profile etc.
    profile_stop_delay: float = 0.0
    profile_trace_pad: int = 0
    # The serving model (continuous batching, batching.py); all None = the fixed schedule.
    max_num_seqs: int | None = None
    step_ms_base: float | None = None  # None: --itl-ms
    step_ms_per_seq: float | None = None
    max_num_batched_tokens: int | None = None
    prefill_ms_per_token: float | None = None
    kv_cache_tokens: int | None = None
    oom_above_seqs: int | None = None
    chat_template: str = ""  # {prompt}: the user's message; "": the model has none
    phases: tuple[Phase, ...] = ()  # scripted metric steps (phases.py)
    metrics_fault: str = ""  # huge | slow | malformed: a hostile /metrics (tests)

    @property
    def batching(self) -> bool:
        """Whether any serving-model flag was given (``--oom-above-seqs`` alone is not one)."""
        return any(
            v is not None
            for v in (
                self.max_num_seqs,
                self.step_ms_base,
                self.step_ms_per_seq,
                self.max_num_batched_tokens,
                self.prefill_ms_per_token,
                self.kv_cache_tokens,
            )
        )

    @property
    def step_base_ms(self) -> float:
        return self.itl_ms if self.step_ms_base is None else self.step_ms_base

    @property
    def step_per_seq_ms(self) -> float:
        return self.step_ms_per_seq or 0.0

    @property
    def prefill_per_token_ms(self) -> float:
        return self.prefill_ms_per_token or 0.0

    @property
    def fails_with_oom(self) -> bool:
        """``--max-num-seqs`` above ``--oom-above-seqs``: start-up ends in a CUDA OOM."""
        return (
            self.oom_above_seqs is not None
            and self.max_num_seqs is not None
            and self.max_num_seqs > self.oom_above_seqs
        )

    def fault_for(self, request_number: int) -> Fault | None:
        for fault in self.faults:
            if fault.applies_to(request_number):
                return fault
        return None


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_sim_arguments(p: argparse.ArgumentParser) -> None:
    """Add the simulator's flags to ``p`` (shared by both front ends)."""
    d = SimSettings()
    p.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    p.add_argument("--host", default=d.host, help=f"address to bind (default {d.host})")
    p.add_argument("--model", default=d.model, help=f"model id served (default {d.model})")
    p.add_argument(
        "--startup-seconds",
        type=_non_negative,
        default=d.startup_seconds,
        help="seconds of fake shard loading; /health answers 503 meanwhile (default 0)",
    )
    p.add_argument("--shards", type=_positive_int, default=d.shards, help="shards to 'load'")
    p.add_argument("--ttft-ms", type=_non_negative, default=d.ttft_ms, help="time to first chunk")
    p.add_argument("--itl-ms", type=_non_negative, default=d.itl_ms, help="time between chunks")
    p.add_argument(
        "--tokens-per-chunk",
        type=_positive_int,
        default=d.tokens_per_chunk,
        help="tokens carried by each streamed chunk (MTP, --stream-interval)",
    )
    p.add_argument(
        "--default-max-tokens",
        type=_positive_int,
        default=d.default_max_tokens,
        help="output length when a request sets no max_tokens",
    )
    p.add_argument(
        "--eos-after",
        type=int,
        default=d.eos_after,
        help="stop after this many tokens unless the request sets ignore_eos (0 = never)",
    )
    p.add_argument(
        "--usage",
        choices=USAGE_MODES,
        default=d.usage,
        help="continuous: honour stream_options fully; final: never per-chunk usage; none: none",
    )
    p.add_argument(
        "--role-chunk-ms",
        type=float,
        default=d.role_chunk_ms,
        help="chat: send the role-only first chunk this long after arrival (default: with the "
        "first token)",
    )
    p.add_argument(
        "--drop-after-chunks",
        type=int,
        default=d.drop_after_chunks,
        help="chunks sent before a 'drop' fault closes the connection",
    )
    p.add_argument(
        "--fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND[:EVERY]",
        help="inject a fault into every EVERY-th generation request: an HTTP status (429, 500), "
        "drop, hang or malformed; repeatable, the first that applies wins",
    )
    p.add_argument(
        "--no-models-while-loading",
        action="store_true",
        help="answer /v1/models 503 while loading (default: 200 at once, as SGLang does)",
    )
    add_serving_model_arguments(p)
    p.add_argument(
        "--profiler-config",
        default="",
        help="vLLM's flag: JSON with torch_profiler_dir; attaches /start_profile, /stop_profile",
    )
    p.add_argument(
        "--profile-stop-delay",
        type=_non_negative,
        default=0.0,
        help="seconds /stop_profile takes (a slow trace flush)",
    )
    p.add_argument(
        "--profile-trace-pad",
        type=int,
        default=0,
        help="pad each written trace with about this many incompressible bytes",
    )
    p.add_argument(
        "--speed-file",
        default="",
        metavar="PATH",
        help="read at start: a number that scales every step time (2 = twice as slow), as an "
        "engine upgrade would, then optionally a line 'version V': the engine version the "
        "agent records in the run's provenance; a missing file is 1",
    )
    p.add_argument(
        "--chat-template",
        default="",
        metavar="TEXT",
        help="the served model's chat template, {prompt} standing for the user's message: "
        "POST /tokenize with messages renders it (then /detokenize gives the text back), as "
        "vLLM's does; without it /tokenize with messages answers 400, as for a model with none",
    )
    p.add_argument(
        "--tag",
        default="",
        help="ignored: a flag with no effect, for ablations that check a null result",
    )
    p.add_argument(
        "--launch-cv",
        type=_non_negative,
        default=0.0,
        metavar="CV",
        help="launch-to-launch variance: every time (TTFT, ITL, each step's parts) is scaled by "
        "one factor drawn at start-up, log-normal with this coefficient of variation, as real "
        "engines vary between restarts (default 0: every launch alike)",
    )
    p.add_argument(
        "--launch-seed",
        type=int,
        metavar="SEED",
        help="the seed of --launch-cv's draw (default: a fresh one each launch)",
    )


def add_serving_model_arguments(p: argparse.ArgumentParser) -> None:
    """The continuous-batching model's flags (docs/simulator.md); none given = fixed schedule."""
    g = p.add_argument_group(
        "serving model",
        "continuous batching: any of these flags replaces the fixed TTFT + j*ITL schedule by "
        "steps of B + S*running + P*prefill_tokens ms (--ttft-ms then no longer applies)",
    )
    g.add_argument(
        "--max-num-seqs",
        type=_positive_int,
        metavar="N",
        help="at most N requests hold a batch slot at once; the rest wait (default: no limit)",
    )
    g.add_argument(
        "--step-ms-base",
        type=_non_negative,
        metavar="B",
        help="fixed part of one engine step, ms (default: --itl-ms)",
    )
    g.add_argument(
        "--step-ms-per-seq",
        type=_non_negative,
        metavar="S",
        help="ms a step takes per running request (default 0)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int,
        metavar="T",
        help="prompt tokens prefilled per step, in chunks (default: no limit)",
    )
    g.add_argument(
        "--prefill-ms-per-token",
        type=_non_negative,
        metavar="P",
        help="ms a step takes per prompt token it prefills (default 0)",
    )
    g.add_argument(
        "--kv-cache-tokens",
        type=_positive_int,
        metavar="K",
        help="KV cache size: a request holds prompt + output tokens; one that does not fit "
        "waits (default: no limit)",
    )
    p.add_argument(
        "--metrics-fault",
        choices=("huge", "slow", "malformed"),
        default="",
        help="a hostile /metrics: 40 MiB, answered after 5 s, or not the text format",
    )
    p.add_argument(
        "--phase",
        type=parse_phase,
        action="append",
        default=[],
        metavar="KIND@START[-END][xRATE]",
        help="scripted metric steps from the first request: queue (waiting grows), cache-full "
        "(KV 100 %% and preemptions), slow (requests stream RATE times slower); repeatable",
    )
    g.add_argument(
        "--oom-above-seqs",
        type=_positive_int,
        metavar="M",
        help="with --max-num-seqs above M, fail during start-up with a CUDA out-of-memory "
        "error and exit 1",
    )


def launch_factor(cv: float, seed: int | None) -> float:
    """One launch's speed factor: log-normal with coefficient of variation ``cv`` and mean 1."""
    if cv <= 0:
        return 1.0
    sigma = math.sqrt(math.log1p(cv * cv))
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    return math.exp(rng.gauss(-sigma * sigma / 2.0, sigma))


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def speed_scale(path: str) -> float:
    """The number in ``path`` (1.0 when no path is given or the file is missing)."""
    return read_upgrade(path).scale


def settings_from_args(args: argparse.Namespace) -> SimSettings:
    scale = speed_scale(getattr(args, "speed_file", "")) * launch_factor(
        args.launch_cv, args.launch_seed
    )
    return _settings(args, scale)


def _settings(args: argparse.Namespace, scale: float) -> SimSettings:
    return SimSettings(
        host=args.host,
        port=args.port,
        model=args.model,
        startup_seconds=args.startup_seconds,
        shards=args.shards,
        ttft_ms=args.ttft_ms * scale,
        itl_ms=args.itl_ms * scale,
        tokens_per_chunk=args.tokens_per_chunk,
        default_max_tokens=args.default_max_tokens,
        eos_after=args.eos_after,
        usage=args.usage,
        role_chunk_ms=args.role_chunk_ms,
        drop_after_chunks=args.drop_after_chunks,
        faults=tuple(args.fault),
        models_while_loading=not args.no_models_while_loading,
        profiler_config=args.profiler_config,
        profile_stop_delay=args.profile_stop_delay,
        profile_trace_pad=args.profile_trace_pad,
        max_num_seqs=args.max_num_seqs,
        step_ms_base=_scaled(args.step_ms_base, scale),
        step_ms_per_seq=_scaled(args.step_ms_per_seq, scale),
        max_num_batched_tokens=args.max_num_batched_tokens,
        prefill_ms_per_token=_scaled(args.prefill_ms_per_token, scale),
        kv_cache_tokens=args.kv_cache_tokens,
        oom_above_seqs=args.oom_above_seqs,
        chat_template=args.chat_template,
        phases=tuple(getattr(args, "phase", None) or ()),
        metrics_fault=getattr(args, "metrics_fault", "") or "",
    )
