"""Why a server failed: the reasons as an enum and the log signatures that identify them.

The signatures are the exact messages the engines and their libraries print (torch, NCCL,
uvicorn, argparse, huggingface_hub, transformers); the first line of the log tail that matches
one decides the reason, checked in table order so the cause (a CUDA OOM) wins over its
consequences (an NCCL watchdog timeout on the other ranks).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from enum import StrEnum


class FailureReason(StrEnum):
    CUDA_OOM = "CUDA_OOM"
    ILLEGAL_MEMORY_ACCESS = "ILLEGAL_MEMORY_ACCESS"
    NCCL_ERROR = "NCCL_ERROR"
    ADDRESS_IN_USE = "ADDRESS_IN_USE"
    BAD_ARGUMENT = "BAD_ARGUMENT"  # argparse / pydantic rejected a flag or its value
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"  # no such path, not a repo id, not in the offline cache
    OOM_KILLED = "OOM_KILLED"  # the kernel's OOM killer (host memory)
    KILLED_BY_SIGNAL = "KILLED_BY_SIGNAL"  # a signal the agent did not send
    STARTUP_TIMEOUT = "STARTUP_TIMEOUT"
    EXITED = "EXITED"  # exited with no known signature; the log tail says more


@dataclass(frozen=True)
class Signature:
    reason: FailureReason
    pattern: re.Pattern[str]


def _sig(reason: FailureReason, *patterns: str) -> Signature:
    return Signature(reason, re.compile("|".join(f"(?:{p})" for p in patterns)))


R = FailureReason
# Order matters: causes before the errors they trigger elsewhere.
COMMON_SIGNATURES: tuple[Signature, ...] = (
    _sig(
        R.CUDA_OOM,
        r"torch\.OutOfMemoryError: CUDA out of memory",
        r"torch\.cuda\.OutOfMemoryError",
        r"CUDA out of memory\. Tried to allocate",
        r"CUDA error: out of memory",
        r"cudaErrorMemoryAllocation",
        r"Not enough memory\. Please try to increase --mem-fraction-static",  # SGLang
        r"No available memory for the cache blocks",  # vLLM
    ),
    _sig(
        R.ILLEGAL_MEMORY_ACCESS,
        r"an illegal memory access was encountered",
        r"cudaErrorIllegalAddress",
        r"CUDA error: misaligned address",
    ),
    _sig(
        R.NCCL_ERROR,
        r"DistBackendError: NCCL error",
        r"NCCL error in: ",
        r"ncclInternalError|ncclUnhandledCudaError|ncclSystemError|ncclInvalidUsage",
        r"ncclRemoteError",
        r"ProcessGroupNCCL.*(?:Watchdog caught collective operation timeout|timed out)",
    ),
    _sig(
        R.ADDRESS_IN_USE,
        r"\[Errno 98\]",
        r"[Aa]ddress already in use",
        r"error while attempting to bind on address",
    ),
    _sig(
        R.MODEL_NOT_FOUND,
        r"HFValidationError: Repo id must be",
        r"RepositoryNotFoundError",
        r"LocalEntryNotFoundError",
        r"is not a local folder and is not a valid model identifier",
        r"does not appear to have a file named config\.json",
        r"Can't load the configuration of",
        r"Invalid repository ID or local directory specified",  # vLLM
        r"No such file or directory: .*config\.json",
    ),
    _sig(
        R.BAD_ARGUMENT,
        r": error: (?:unrecognized arguments|argument |the following arguments are required)",
        r"pydantic_core\._pydantic_core\.ValidationError",
        r"validation errors? for (?:EngineArgs|ModelConfig|SchedulerConfig|CacheConfig|VllmConfig)",
        r"ValueError: (?:Invalid|Unsupported) .*(?:argument|--)",
    ),
)


@dataclass(frozen=True)
class Failure:
    reason: FailureReason
    line: str  # the log line (or fact) that decided it, for a person


def match_line(line: str, signatures: tuple[Signature, ...]) -> FailureReason | None:
    for sig in signatures:
        if sig.pattern.search(line):
            return sig.reason
    return None


def classify_lines(lines: list[str], signatures: tuple[Signature, ...]) -> Failure | None:
    """The first signature in table order that any of ``lines`` matches (causes win)."""
    for sig in signatures:
        for line in lines:
            if sig.pattern.search(line):
                return Failure(sig.reason, line.strip()[:500])
    return None


def classify_exit(
    exit_code: int | None,
    lines: list[str],
    signatures: tuple[Signature, ...],
    oom_killed_pids: tuple[int, ...] = (),
) -> Failure:
    """Why a server that exited on its own failed: the OOM killer's word first (it is a fact,
    not a guess), then the log's signatures, then the signal, else EXITED."""
    if oom_killed_pids:
        pids = ", ".join(str(p) for p in oom_killed_pids)
        return Failure(R.OOM_KILLED, f"kernel log: the OOM killer killed pid {pids}")
    found = classify_lines(lines, signatures)
    if found is not None:
        return found
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return Failure(R.KILLED_BY_SIGNAL, f"killed by {name}")
    what = "exit code unknown" if exit_code is None else f"exit code {exit_code}"
    return Failure(R.EXITED, f"{what}; no known failure line in the log tail")
