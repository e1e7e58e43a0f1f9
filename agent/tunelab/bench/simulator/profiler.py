"""The simulator's engine profiler and caches, with vLLM's endpoints and flags.

``--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR}'`` (vLLM's flag) attaches
``POST /start_profile`` and ``POST /stop_profile``; the stop writes a small gzipped Chrome trace
(``<host>_<pid>.<n>.pt.trace.json.gz``, as torch's tensorboard handler names them) with one
GEMM and one attention kernel per 10 ms of the window. ``--profile-stop-delay`` makes the stop
slow (a window that times out); ``--profile-trace-pad`` pads the trace (a trace over the cap).
Without the flag, ``TUNELAB_PROFILE_DIR`` in its environment (what the agent sets for a generic
server started with ``--profile``) attaches the same endpoints, writing there.
With ``VLLM_SERVER_DEV_MODE=1`` in its environment, ``POST /reset_prefix_cache`` answers 200,
as vLLM's development endpoint; ``POST /flush_cache`` (SGLang's) always does. Counts are in
``/sim/stats``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STEP_US = 10_000


@dataclass
class SimProfiler:
    trace_dir: str = ""
    stop_delay_s: float = 0.0
    pad_bytes: int = 0
    dev_mode: bool = field(default_factory=lambda: os.environ.get("VLLM_SERVER_DEV_MODE") == "1")
    started_at: float | None = None
    traces: int = 0
    starts: int = 0
    stops: int = 0
    resets: int = 0

    @classmethod
    def from_flag(cls, config: str, stop_delay_s: float, pad_bytes: int) -> SimProfiler:
        trace_dir = ""
        if config:
            trace_dir = str(json.loads(config).get("torch_profiler_dir", ""))
        trace_dir = trace_dir or os.environ.get("TUNELAB_PROFILE_DIR", "")
        return cls(trace_dir=trace_dir, stop_delay_s=stop_delay_s, pad_bytes=pad_bytes)

    def start(self) -> tuple[int, str]:
        self.starts += 1
        if self.started_at is not None:
            return 400, "the profiler is already running"
        self.started_at = time.time()
        return 200, ""

    async def stop(self) -> tuple[int, str]:
        self.stops += 1
        if self.started_at is None:
            return 400, "the profiler is not running"
        began, self.started_at = self.started_at, None
        if self.stop_delay_s:
            await asyncio.sleep(self.stop_delay_s)
        self._write(began, time.time())
        return 200, ""

    def stats(self) -> dict[str, Any]:
        return {
            "profiling": self.started_at is not None,
            "starts": self.starts,
            "stops": self.stops,
            "traces": self.traces,
            "cache_resets": self.resets,
        }

    def _write(self, began: float, ended: float) -> None:
        span = max(int((ended - began) * 1e6), STEP_US)
        events: list[dict[str, Any]] = []
        for step, ts in enumerate(range(0, span - STEP_US + 1, STEP_US)):
            events.append(_x("execute_model", "user_annotation", ts, STEP_US - 100, pid=1))
            events.append(_x("nvjet_sim_gemm", "kernel", ts + 100, 6000, step=step))
            events.append(_x("flash_fwd_sim_kernel", "kernel", ts + 6100, 2000, step=step))
        document: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
        if self.pad_bytes:
            document["padding"] = os.urandom(self.pad_bytes // 2).hex()
        self.traces += 1
        name = f"{socket.gethostname()}_{os.getpid()}.{self.traces}.pt.trace.json.gz"
        folder = Path(self.trace_dir)
        folder.mkdir(parents=True, exist_ok=True)
        with gzip.open(folder / name, "wt", compresslevel=1) as out:
            json.dump(document, out)


def _x(name: str, cat: str, ts: int, dur: int, pid: int = 0, step: int = 0) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid}
    event["tid"] = 7 if cat == "kernel" else 1
    if cat == "kernel":
        event["args"] = {"device": 0, "stream": 7}
    return event
