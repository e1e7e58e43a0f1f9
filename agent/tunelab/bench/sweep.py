"""Running a sweep: for each point, warm-up, then a closed or open loop, then its figures.

One aiohttp session per point, its connection pool sized to the concurrency (aiohttp's default
cap of 100 would silently throttle a higher one) and its read buffer large (the 64 KiB default
collapses long outputs). The warm-up goes first, on the same pool, and is left out of the figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

import aiohttp

from tunelab.bench.config import BenchConfig, Point
from tunelab.bench.progress import PROGRESS_INTERVAL, PointProgress, ProgressWriter
from tunelab.bench.records import request_line
from tunelab.bench.selfcheck import Monitor
from tunelab.bench.stats import detailed, summarize
from tunelab.bench.stream import LiveCounters, RequestRecord, send
from tunelab.bench.tokens import TokenPrompts
from tunelab.bench.transport import open_session
from tunelab.bench.workload import Workload, arrival_offsets

RESULT_VERSION = 1


@dataclass
class PointState:
    point: Point
    phase: str = "warmup"
    started: float = 0.0  # perf_counter at the first measured dispatch
    claimed: int = 0
    records: list[RequestRecord] = field(default_factory=list)
    errors: int = 0
    tokens_at_start: int = 0
    warmup_done: int = 0  # warm-up requests finished (the bar's count before measuring)


class Sweep:
    """Runs every point of ``config``; reports progress and writes per-request JSON lines."""

    def __init__(
        self, config: BenchConfig, progress: ProgressWriter | None, requests_out: IO[str] | None
    ) -> None:
        self.config = config
        self.progress = progress
        self.requests_out = requests_out
        self.live = LiveCounters()
        self.outcomes: Counter[str] = Counter()
        self.points = config.points()
        # A stall limit, not a total: a long decode at a slow server may take far longer than
        # any fixed total, but a server that sends nothing for this long is not answering.
        self.timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.request_timeout_s, sock_read=config.request_timeout_s
        )
        self.chat = config.api == "chat"
        self.started_at = time.time()
        self.tokens = TokenPrompts(config.tokenizer) if config.tokenizer else None

    async def run(self, done: list[dict[str, Any]]) -> None:
        """Run every point, appending each summary to ``done`` as it finishes (so a stopped
        sweep still has the points it completed)."""
        for point in self.points:
            summary = await self.run_point(point)
            done.append(summary)
            if summary.get("interrupted"):
                raise asyncio.CancelledError  # Ctrl-C / SIGTERM: the finished requests are kept

    def document(self, points: list[dict[str, Any]], status: str) -> dict[str, Any]:
        """The result document: config, status, one vLLM-compatible summary per point."""
        return {
            "tunelab_bench": RESULT_VERSION,
            "config": self.config.to_dict(),
            "status": status,
            "started_at": self.started_at,
            "finished_at": time.time(),
            "points": points,
            # numbered as the progress line numbers them: point 1/N is the first
            "warnings": [
                f"point {p['point_index'] + 1}/{len(self.config.points())}: {w}"
                for p in points
                for w in p["warnings"]
            ],
        }

    # one point ---------------------------------------------------------------------------------
    async def run_point(self, point: Point) -> dict[str, Any]:
        state = PointState(point)
        workload = Workload(self.config, point.index, self.tokens)
        reporter = asyncio.get_running_loop().create_task(self._report(state))
        try:
            async with open_session(point.concurrency) as session:
                if self.config.warmup:
                    await self._warmup(session, workload, state)
                state.phase = "measure"
                state.tokens_at_start = self.live.output_tokens
                monitor = Monitor(
                    self.config.max_mean_loop_lag_ms,
                    self.config.max_loop_lag_ms,
                    self.config.max_client_cpu,
                    self.config.max_client_runqueue,
                )
                monitor.start()
                state.started = time.perf_counter()
                try:
                    if point.concurrency:
                        await self._closed_loop(session, workload, state)
                    else:
                        await self._open_loop(session, workload, state)
                except asyncio.CancelledError:
                    # stopped mid-point: summarise the requests that finished, then stop
                    interrupted = True
                else:
                    interrupted = False
                check = monitor.stop()
        finally:
            reporter.cancel()
        state.phase = "done"
        self._emit_progress(state)
        ended = max((r.end for r in state.records), default=state.started)
        summary = self._describe(point, state, ended - state.started)
        summary.update(summarize(state.records, ended - state.started, *self._slos()))
        summary["client_check"] = check.to_dict()
        summary["client_saturated"] = summary["client_check"]["client_saturated"]
        summary["client_starved"] = summary["client_check"]["client_starved"]
        if self.config.save_detailed:
            summary.update(detailed(state.records, state.started))
        summary["warnings"] = self._warnings(summary)
        if interrupted:
            summary["interrupted"] = True
            summary["warnings"].append(
                f"stopped before the point finished: {summary['completed']} requests completed"
            )
        self._write_records(point, state)
        if self.progress is not None:
            self.progress.event(
                "point_done",
                point_index=point.index,
                completed=summary["completed"],
                failed=summary["failed"],
                output_throughput=summary["output_throughput"],
                client_saturated=summary["client_saturated"],
                client_starved=summary["client_starved"],
            )
        return summary

    def _slos(self) -> tuple[float, float]:
        return self.config.slo_ttft_ms, self.config.slo_tpot_ms

    async def _one(
        self, session: aiohttp.ClientSession, workload: Workload, index: int, warmup: bool
    ) -> RequestRecord:
        planned = workload.request(index)
        rec = RequestRecord(index, warmup, planned.input_len, planned.output_len)
        if self.config.save_detailed:
            rec.text = []
        return await self._send(session, planned.body, rec)

    async def _send(
        self, session: aiohttp.ClientSession, body: bytes, rec: RequestRecord
    ) -> RequestRecord:
        await send(session, self.config.endpoint, body, rec, self.chat, self.live, self.timeout)
        self.outcomes[rec.error_kind or "ok"] += 1
        return rec

    async def _warmup(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState
    ) -> None:
        point = state.point
        width = min(self.config.warmup, point.concurrency or self.config.warmup)
        queue = iter(range(self.config.warmup))
        done: list[RequestRecord] = []

        async def worker() -> None:
            for i in queue:
                done.append(await self._one(session, workload, -1 - i, warmup=True))
                state.warmup_done = len(done)

        await asyncio.gather(*(worker() for _ in range(width)))
        self._write(point, done, time.perf_counter())

    async def _closed_loop(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState
    ) -> None:
        point = state.point
        stop_at = state.started + point.duration_seconds if point.duration_seconds else math.inf

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                index = state.claimed
                if point.requests and index >= point.requests:
                    return
                state.claimed += 1
                rec = await self._one(session, workload, index, warmup=False)
                self._done(state, rec)

        await asyncio.gather(*(worker() for _ in range(point.concurrency)))

    async def _open_loop(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState
    ) -> None:
        point = state.point
        tasks: set[asyncio.Task[RequestRecord]] = set()
        offsets = arrival_offsets(
            point.request_rate,
            self.config.burstiness,
            self.config.seed,
            point.requests,
            point.duration_seconds,
        )
        for index, offset in enumerate(offsets):
            due = state.started + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            planned = workload.request(index)
            rec = RequestRecord(index, False, planned.input_len, planned.output_len, scheduled=due)
            if self.config.save_detailed:
                rec.text = []
            task = asyncio.get_running_loop().create_task(self._send(session, planned.body, rec))
            tasks.add(task)
            state.claimed += 1

            def finished(task: asyncio.Task[RequestRecord], rec: RequestRecord = rec) -> None:
                tasks.discard(task)
                if not task.cancelled():
                    self._done(state, rec)

            task.add_done_callback(finished)
        while tasks:
            await asyncio.gather(*list(tasks))

    def _done(self, state: PointState, rec: RequestRecord) -> None:
        state.records.append(rec)
        if not rec.ok:
            state.errors += 1

    # progress ----------------------------------------------------------------------------------
    async def _report(self, state: PointState) -> None:
        while True:
            self._emit_progress(state)
            await asyncio.sleep(PROGRESS_INTERVAL)

    def _emit_progress(self, state: PointState) -> None:
        if self.progress is None:
            return
        measuring = state.phase != "warmup" and state.started > 0
        elapsed = time.perf_counter() - state.started if measuring else 0.0
        tokens = self.live.output_tokens - state.tokens_at_start if measuring else 0
        self.progress.progress(
            PointProgress(
                point_index=state.point.index,
                point_count=len(self.points),
                concurrency=state.point.concurrency,
                request_rate=state.point.request_rate,
                phase=state.phase,
                # while warming up: the warm-up's own count, so its bar has a count and an ETA
                requests_done=state.warmup_done if not measuring else len(state.records),
                requests_total=self.config.warmup if not measuring else state.point.requests,
                errors=state.errors,
                output_tokens_per_second=tokens / elapsed if elapsed > 0 else 0.0,
                elapsed_seconds=elapsed,
                output_tokens_total=self.live.output_tokens,
                requests_by_outcome=dict(self.outcomes),
                at=time.time(),
            )
        )

    # output ------------------------------------------------------------------------------------
    def _describe(self, point: Point, state: PointState, duration: float) -> dict[str, Any]:
        """The vLLM header fields of a result, then tunelab's."""
        cfg = self.config
        return {
            "date": datetime.now(UTC).strftime("%Y%m%d-%H%M%S"),
            "endpoint_type": "openai-chat" if self.chat else "openai",
            "backend": "openai-chat" if self.chat else "openai",
            "label": cfg.label or None,
            "model_id": cfg.model,
            "tokenizer_id": cfg.tokenizer or None,
            "num_prompts": len(state.records),
            "request_rate": point.request_rate if point.request_rate else "inf",
            "burstiness": cfg.burstiness,
            "max_concurrency": point.concurrency or None,
            "point_index": point.index,
            "concurrency": point.concurrency,
            "requests_planned": point.requests,
            "duration_planned": point.duration_seconds,
            "warmup_requests": cfg.warmup,
            "ignore_eos": cfg.ignore_eos,
            "temperature": cfg.temperature if cfg.send_temperature else None,
            "slo_ttft_ms": cfg.slo_ttft_ms or None,
            "slo_tpot_ms": cfg.slo_tpot_ms or None,
        }

    def _warnings(self, summary: dict[str, Any]) -> list[str]:
        out = []
        sources = summary["token_count_source"]
        if sources.get("chunks"):
            out.append(
                f"{sources['chunks']} requests had no usage in the stream: output tokens were "
                "counted as one per chunk"
            )
        if sources.get("usage_final"):
            out.append(
                f"{sources['usage_final']} requests had no per-chunk usage: per-token ITL of "
                "multi-token chunks is estimated from the request's mean tokens per chunk"
            )
        out.extend(summary["client_check"]["reasons"])
        if summary["completed"] == 0:
            out.append("no request completed")
        return out

    def _write_records(self, point: Point, state: PointState) -> None:
        self._write(point, state.records, state.started)

    def _write(self, point: Point, records: list[RequestRecord], origin: float) -> None:
        if self.requests_out is None:
            return
        for rec in records:
            self.requests_out.write(json.dumps(request_line(point.index, rec, origin)) + "\n")
        self.requests_out.flush()


def run_sweep(config: BenchConfig, requests_out: IO[str] | None = None) -> dict[str, Any]:
    """Run a whole sweep in this process and return the result document (tests, library use;
    the agent and the CLI run it in the bench process instead)."""
    sweep = Sweep(config, None, requests_out)
    points: list[dict[str, Any]] = []
    asyncio.run(sweep.run(points))
    return sweep.document(points, "completed")
