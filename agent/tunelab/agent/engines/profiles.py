"""The engine profiles as data: vLLM, SGLang and a generic OpenAI-compatible server.

Every pattern is a message the engine prints, taken from its source (vLLM 0.32:
``v1/engine/core.py``, ``v1/worker/gpu_model_runner.py``, ``compilation/monitor.py``,
``model_executor/warmup/kernel_warmup.py``, ``model_executor/model_loader/weight_utils.py``;
SGLang: ``srt/model_executor/model_runner.py``, ``cuda_graph_runner.py``,
``entrypoints/http_server.py``)
and checked against captured logs in ``tests/fixtures/engines``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tunelab.agent.engines.failures import COMMON_SIGNATURES, Signature
from tunelab.agent.engines.phases import Phase
from tunelab.common.engineflags import engine_named

P = Phase
ENGINES = ("vllm", "sglang", "generic")


@dataclass(frozen=True)
class PhaseRule:
    phase: Phase
    pattern: re.Pattern[str]


def _rules(*pairs: tuple[Phase, str]) -> tuple[PhaseRule, ...]:
    return tuple(PhaseRule(phase, re.compile(text)) for phase, text in pairs)


@dataclass(frozen=True)
class EngineProfile:
    name: str
    ready_path: str  # the default readiness path when the spec names none
    metrics_prefix: str  # the prefix of the engine's own Prometheus samples
    phase_lines: tuple[PhaseRule, ...]  # a log line that opens a phase
    bar_phases: tuple[PhaseRule, ...]  # a progress bar's label → the phase it belongs to
    ready_lines: re.Pattern[str] | None  # the engine says it is (nearly) ready: probe now
    signatures: tuple[Signature, ...]
    bar_done_hints_ready: bool  # a finished progress bar means "nearly ready" (generic servers)
    leftovers: str  # what a stop may leave behind and how the agent handles it (README)


VLLM = EngineProfile(
    name="vllm",
    ready_path="/health",
    metrics_prefix="vllm:",
    phase_lines=_rules(
        (P.LOADING_WEIGHTS, r"Starting to load model |Loading weights took|Loading model from"),
        (
            P.COMPILING,
            (
                r"Starting torch\.compile|Dynamo bytecode transform time|Compiling a graph"
                r"|Warming up model for the compilation|saved AOT compiled function"
                r"|Compile and warming up model for size"
            ),
        ),
        (P.AUTOTUNING, r"Running FlashInfer autotune"),
        (
            P.WARMING_UP,
            r"Warming up done\.|init engine \(profile, create kv cache, warmup model\) took",
        ),
        (P.CAPTURING_CUDA_GRAPHS, r"Capturing CUDA graphs"),
    ),
    bar_phases=_rules(
        (P.LOADING_WEIGHTS, r"Loading (?:safetensors|pt) checkpoint shards|Loading weights"),
        (P.CAPTURING_CUDA_GRAPHS, r"Capturing CUDA graphs"),
    ),
    ready_lines=re.compile(r"Application startup complete\.|Starting vLLM (?:API )?server"),
    signatures=COMMON_SIGNATURES,
    bar_done_hints_ready=False,
    leftovers=(
        "ZeroMQ ipc socket files /tmp/<uuid> of its API server, EngineCore and Worker, even "
        "after a clean SIGTERM stop (7 seen with 0.32); psm_* shared-memory ring buffers in "
        "/dev/shm when a process is SIGKILLed (a stop during torch.compile ignores SIGTERM)"
    ),
)

SGLANG = EngineProfile(
    name="sglang",
    ready_path="/health",
    metrics_prefix="sglang:",
    phase_lines=_rules(
        (P.LOADING_WEIGHTS, r"Load weight begin\."),
        (P.AUTOTUNING, r"Running FlashInfer autotune"),
        (P.COMPILING, r"Compiling num tokens|torch\.compile|Piecewise CUDA graph"),
        (P.CAPTURING_CUDA_GRAPHS, r"Capture cuda graph begin\.|Capture (?:draft )?cuda graph bs"),
        (P.WARMING_UP, r"Capture cuda graph end\.|Uvicorn running on|Application startup complete"),
    ),
    bar_phases=_rules(
        (P.LOADING_WEIGHTS, r"Loading (?:safetensors|pt) checkpoint shards|Multi-thread loading"),
        (P.CAPTURING_CUDA_GRAPHS, r"Capturing batches"),
        (P.COMPILING, r"Compiling num tokens"),
    ),
    ready_lines=re.compile(r"The server is fired up and ready to roll!"),
    signatures=COMMON_SIGNATURES,
    bar_done_hints_ready=False,  # shards load long before the graphs are captured
    leftovers=(
        "psm_* and torch shared-memory files (torch_*) of its scheduler and "
        "detokenizer processes when they are SIGKILLed"
    ),
)

GENERIC = EngineProfile(
    name="generic",
    ready_path="/health",
    metrics_prefix="",
    phase_lines=(),
    bar_phases=_rules((P.LOADING_WEIGHTS, r"[Ll]oad|checkpoint|shard|weight")),
    ready_lines=re.compile(r"Application startup complete\.|Uvicorn running on|[Ll]istening on"),
    signatures=COMMON_SIGNATURES,
    bar_done_hints_ready=True,
    leftovers="files in /dev/shm that its processes had open or mapped",
)

PROFILES = {p.name: p for p in (VLLM, SGLANG, GENERIC)}


def detect(argv: tuple[str, ...] | list[str]) -> EngineProfile:
    """The profile an argv names (:func:`tunelab.common.engineflags.engine_named`: ``vllm
    serve``, ``python -m sglang.launch_server`` ...); anything else is generic."""
    return PROFILES.get(engine_named(argv), GENERIC)


def profile_for(engine: str, argv: tuple[str, ...] | list[str]) -> EngineProfile:
    """The spec's explicit choice, else what the argv names."""
    return PROFILES[engine] if engine else detect(argv)
