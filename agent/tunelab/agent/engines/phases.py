"""Start-up phases as data: the phases, their order, and one function that decides a change.

An engine's log says which phase it is in (``Load weight begin.``, ``Capture cuda graph begin.``);
a phase only moves forward, except that vLLM and SGLang compile, autotune and capture per graph
size and may interleave those three. READY is set
by the readiness probe, never by a log line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    IMPORTING = "IMPORTING"  # spawned: Python importing torch, parsing args, starting workers
    LOADING_WEIGHTS = "LOADING_WEIGHTS"
    COMPILING = "COMPILING"  # torch.compile / Dynamo / Inductor, JIT kernels
    CAPTURING_CUDA_GRAPHS = "CAPTURING_CUDA_GRAPHS"
    AUTOTUNING = "AUTOTUNING"  # FlashInfer / fp4-gemm autotune
    WARMING_UP = "WARMING_UP"  # HTTP server up, warm-up requests or KV-cache profiling
    READY = "READY"


ORDER: dict[Phase, int] = {
    Phase.IMPORTING: 0,
    Phase.LOADING_WEIGHTS: 1,
    Phase.COMPILING: 2,
    Phase.AUTOTUNING: 3,
    Phase.CAPTURING_CUDA_GRAPHS: 4,
    Phase.WARMING_UP: 5,
    Phase.READY: 6,
}
# Engines compile per captured shape and tune between captures: within this group any move goes.
INTERLEAVED: frozenset[Phase] = frozenset(
    {Phase.COMPILING, Phase.AUTOTUNING, Phase.CAPTURING_CUDA_GRAPHS}
)


def may_enter(current: Phase, target: Phase) -> bool:
    """Whether a log line announcing ``target`` moves a server that is in ``current``."""
    if current is Phase.READY or target is current:
        return False
    return ORDER[target] > ORDER[current] or {current, target} <= INTERLEAVED


@dataclass(frozen=True)
class PhaseSpan:
    """One phase the server went through: when it began and how long it lasted (0 while open)."""

    phase: Phase
    started_at: float
    seconds: float = 0.0
