"""Running a sweep: for each point, warm-up, then a closed or open loop, then its figures.

One aiohttp session per point, its connection pool sized to the concurrency (aiohttp's default
cap of 100 would silently throttle a higher one) and its read buffer large (the 64 KiB default
collapses long outputs). The warm-up goes first, on the same pool, and is left out of the figures.

The clock: a closed loop (and an open loop with ``max_concurrency``) first opens and warms as
many connections as it will use (``connections_warmed``) and builds its first wave of request
bodies; a closed loop's window then starts at its first request's write (``clock_start:
first_request``), because aiohttp writes none of C requests started at once until it has set
all of them up (0.7 ms each on a loaded 2-core VM: 180 ms at C = 256), and the server has no
work before that. An open loop's clock starts at its first arrival, the origin of its schedule
(``first_arrival``); without a cap it connects as requests need, and each request's
``send_delay`` shows what that cost.

Multi-turn: a conversation sends turn ``t + 1`` only after turn ``t``'s answer has ended (and
``think_time_s`` has passed); its prompt is the history so far plus a new user message. The
closed loop's concurrency and the open loop's rate count conversations, not requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import IO, Any

import aiohttp

from tunelab.bench.chattemplate import server_chat_prompts
from tunelab.bench.config import BenchConfig, Point
from tunelab.bench.datasets import Dataset
from tunelab.bench.loadsearch import LoadSearch
from tunelab.bench.profiling import (
    RESET_TIMEOUT_S,
    START_TIMEOUT_S,
    HttpOutcome,
    ProfileWindow,
    post,
    stop_profile,
    wait_window,
)
from tunelab.bench.progress import PROGRESS_INTERVAL, PointProgress, ProgressWriter
from tunelab.bench.promptfiles import DatasetFileError
from tunelab.bench.records import request_line
from tunelab.bench.selfcheck import Monitor
from tunelab.bench.stats import breakdowns, detailed, summarize
from tunelab.bench.stream import LiveCounters, RequestRecord, send
from tunelab.bench.timeline.client import ClientWindows
from tunelab.bench.tokens import TokenPrompts
from tunelab.bench.transport import PoolStats, open_session, warm_connections
from tunelab.bench.workload import PlannedRequest, Workload, arrival_offsets, ramp_offsets

RESULT_VERSION = 1
WARM_TIMEOUT_S = 30.0


@dataclass
class PointState:
    point: Point
    phase: str = "warmup"
    started: float = 0.0  # perf_counter at the first measured dispatch
    claimed: int = 0
    records: list[RequestRecord] = field(default_factory=list)
    errors: int = 0
    tokens_at_start: int = 0
    requests: int = 0  # the point's count, resolved (a timed trace: its rows)
    clock_start: str = "first_request"
    connections_warmed: int = 0
    warmup_done: int = 0  # warm-up requests finished (the bar's count before measuring)
    first_wave: dict[int, PlannedRequest] = field(default_factory=dict)  # built off the clock
    planned_seconds: float = 0.0  # when the last request is due, where a schedule says


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
        self.load_search: LoadSearch | None = None
        self.load_points: dict[float, list[int]] = {}
        # A stall limit, not a total: a long decode at a slow server may take far longer than
        # any fixed total, but a server that sends nothing for this long is not answering.
        self.timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.request_timeout_s, sock_read=config.request_timeout_s
        )
        self.chat = config.api == "chat"
        self.started_at = time.time()
        self.tokens = TokenPrompts(config.tokenizer) if config.tokenizer else None
        self.dataset = Dataset(config, self.tokens)
        if config.chat_template and config.dataset == "file" and not self.chat:
            self.dataset.wrap_in_chat_template(
                partial(server_chat_prompts, config.server_url, config.model)
            )
        if config.dataset_sha256 and self.dataset.sha256 != config.dataset_sha256.lower():
            raise DatasetFileError(
                config.dataset_path,
                f"content sha256 {self.dataset.sha256} is not the expected "
                f"{config.dataset_sha256.lower()}",
            )
        self.multi_turn = config.dataset == "multi-turn"
        self.windows = (
            ClientWindows(config.timeline_step_s, config.timeline_start)
            if config.timeline_step_s
            else None
        )

    async def run(self, done: list[dict[str, Any]]) -> None:
        """Run every point, appending each summary to ``done`` as it finishes (so a stopped
        sweep still has the points it completed)."""
        if self.config.find_axis:
            await self.run_load_search(done)
            return
        for point in self.points:
            summary = await self.run_point(point)
            done.append(summary)
            if summary.get("interrupted"):
                raise asyncio.CancelledError  # Ctrl-C / SIGTERM: the finished requests are kept

    async def run_load_search(self, done: list[dict[str, Any]]) -> None:
        """Ladder, bisection and a confirming repeat on this one server (loadsearch.py); the
        answer goes in the document's ``load_search``, each point says its phase and verdict."""
        search = LoadSearch(
            self.config.find_axis,
            self.config.find_max,
            dict(self.config.find_slo),
            plateau=self.config.find_plateau,
        )
        self.load_search = search
        at: dict[float, list[int]] = {}
        while (load := search.next_load()) is not None:
            point = self.config.point_at(len(done), load)
            self.points.append(point)
            phase = search.phase
            summary = await self.run_point(point)
            summary["load_search_phase"] = phase
            summary["meets_slo"] = search.tell(load, summary)
            at.setdefault(load, []).append(point.index)
            done.append(summary)
            self.load_points = at
            if summary.get("interrupted"):
                raise asyncio.CancelledError

    def document(self, points: list[dict[str, Any]], status: str) -> dict[str, Any]:
        """The result document: config, status, one vLLM-compatible summary per point."""
        return {
            "tunelab_bench": RESULT_VERSION,
            "config": self.config.to_dict(),
            "status": status,
            "started_at": self.started_at,
            "finished_at": time.time(),
            "dataset": self.dataset.describe(),
            "points": points,
            **(
                {"load_search": self.load_search.document(self.load_points)}
                if self.load_search is not None
                else {}
            ),
            # numbered as the progress line numbers them: point 1/N is the first
            "warnings": [
                f"point {p['point_index'] + 1}/{len(self.points)}: {w}"
                for p in points
                for w in p["warnings"]
            ]
            + self.dataset.warnings(),
            **({"client_timeline": self.windows.to_dict()} if self.windows is not None else {}),
        }

    # one point ---------------------------------------------------------------------------------
    async def run_point(self, point: Point) -> dict[str, Any]:
        state = PointState(point)
        began = time.perf_counter()
        state.requests = point.requests
        if not point.concurrency:
            state.clock_start = "first_arrival"
        if self.config.timed_trace and not point.duration_seconds:
            # every row, or the first N (vLLM replays the first --num-prompts lines)
            state.requests = min(point.requests or self.dataset.size, self.dataset.size)
        state.planned_seconds = self._planned(state)
        workload = Workload(self.config, point.index, self.tokens, self.dataset)
        reporter = asyncio.get_running_loop().create_task(self._report(state))
        reset: HttpOutcome | None = None
        window: ProfileWindow | None = None
        profiler: asyncio.Task[None] | None = None
        measured = asyncio.Event()
        pool = PoolStats()
        slots = point.concurrency or point.max_concurrency
        try:
            if self.config.reset_cache_url:
                url = self.config.server_url(self.config.reset_cache_url)
                reset = await post(url, None, RESET_TIMEOUT_S)
            async with open_session(slots, pool) as session:
                interrupted = False
                try:
                    await self._prepare(session, workload, state, slots)
                except asyncio.CancelledError:
                    interrupted = True  # stopped before the clock: an empty point, then stop
                state.phase = "measure"
                state.tokens_at_start = self.live.output_tokens
                if point.index == self.config.profile_point:
                    window = ProfileWindow()
                    profiler = asyncio.get_running_loop().create_task(
                        self._profile(state, window, measured)
                    )
                monitor = Monitor(
                    self.config.max_mean_loop_lag_ms,
                    self.config.max_loop_lag_ms,
                    self.config.max_client_cpu,
                    self.config.max_client_runqueue,
                )
                opened_before = pool.opened
                monitor.start()
                state.started = time.perf_counter()
                try:
                    if interrupted:
                        pass
                    elif point.concurrency:
                        await self._closed_loop(session, workload, state)
                    else:
                        await self._open_loop(session, workload, state)
                except asyncio.CancelledError:
                    # stopped mid-point: summarise the requests that finished, then stop
                    interrupted = True
                check = monitor.stop(pool.opened - opened_before)
        finally:
            reporter.cancel()
            measured.set()
            if profiler is not None:  # the stop is sent even when the point was interrupted
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(profiler)
        state.phase = "done"
        self._emit_progress(state)
        if state.clock_start == "first_request" and state.records:
            state.started = min(r.dispatched for r in state.records)
        ended = max((r.end for r in state.records), default=state.started)
        if self.windows is not None:
            self.windows.mark_point(
                point.index,
                began,
                state.started,
                ended,
                concurrency=point.concurrency,
                request_rate=point.request_rate,
                ramp=bool(self.config.ramp),
            )
        summary = self._describe(point, state, ended - state.started)
        summary.update(
            summarize(
                state.records,
                ended - state.started,
                *self._slos(),
                slo_e2el_ms=self.config.slo_e2el_ms,
                percentiles=self.config.percentiles,
                percentile_metrics=self.config.percentile_metrics,
            )
        )
        summary.update(breakdowns(state.records))
        summary["client_check"] = check.to_dict()
        summary["client_saturated"] = summary["client_check"]["client_saturated"]
        summary["client_starved"] = summary["client_check"]["client_starved"]
        summary["client_cause"] = summary["client_check"]["client_cause"]
        if self.config.save_detailed:
            summary.update(detailed(state.records, state.started))
        summary["warnings"] = self._warnings(summary)
        if reset is not None:
            summary["cache_reset"] = reset.to_dict()
            if not reset.ok:
                summary["warnings"].append(f"cache reset failed: {reset.error}")
        if window is not None:
            summary["profile"] = window.to_dict()
            if not window.ok:
                summary["warnings"].append(str(window.warning()))
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

    async def _prepare(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState, slots: int
    ) -> None:
        """Off the clock: warm-up requests, the pool's connections, the first wave's bodies."""
        point = state.point
        if self.config.warmup or self.config.warmup_seconds:
            await self._warmup(session, workload, state)
        if slots:
            state.connections_warmed = await warm_connections(
                session, self.config.models_url, slots, WARM_TIMEOUT_S
            )
        if point.concurrency and not self.multi_turn:
            # built before the clock, so that building them does not stagger the first writes
            first = min(point.concurrency, state.requests or point.concurrency)
            state.first_wave = {i: workload.request(i) for i in range(first)}

    async def _profile(
        self, state: PointState, window: ProfileWindow, ended: asyncio.Event
    ) -> None:
        """Start the engine's profiler, wait for the window, stop it (always, once started)."""
        cfg = self.config
        body = cfg.profile_start_body.encode() or None
        start_url, stop_url = (
            cfg.server_url(cfg.profile_start_url),
            cfg.server_url(cfg.profile_stop_url),
        )
        if not start_url or not stop_url:
            window.start = HttpOutcome(
                False, None, "no profiler URL: name start_url and stop_url", 0
            )
            return
        window.start = await post(start_url, body, START_TIMEOUT_S)
        began, tokens, requests = time.perf_counter(), self.live.output_tokens, len(state.records)
        if window.start.ok:
            await wait_window(
                cfg.profile_seconds,
                cfg.profile_requests,
                lambda: len(state.records) - requests,
                ended,
            )
        window.window_seconds = time.perf_counter() - began
        window.output_tokens = self.live.output_tokens - tokens
        window.requests = len(state.records) - requests
        window.stop = await stop_profile(stop_url, None, cfg.profile_stop_timeout_s)

    def _slos(self) -> tuple[float, float]:  # ttft, tpot
        return self.config.slo_ttft_ms, self.config.slo_tpot_ms

    async def _one(
        self, session: aiohttp.ClientSession, workload: Workload, index: int, warmup: bool
    ) -> RequestRecord:
        planned = workload.request(index)
        rec = self._record(planned, warmup)
        return await self._send(session, planned.body, rec)

    def _record(
        self, planned: PlannedRequest, warmup: bool, scheduled: float = 0.0
    ) -> RequestRecord:
        rec = RequestRecord(
            planned.index, warmup, planned.input_len, planned.output_len, scheduled=scheduled
        )
        rec.group = planned.group
        rec.turn = planned.turn
        rec.conversation = planned.conversation
        if self.config.save_detailed or self.multi_turn:
            rec.text = []
        return rec

    async def _send(
        self, session: aiohttp.ClientSession, body: bytes, rec: RequestRecord
    ) -> RequestRecord:
        await send(session, self.config.endpoint, body, rec, self.chat, self.live, self.timeout)
        self.outcomes[rec.error_kind or "ok"] += 1
        if self.windows is not None:
            self.windows.add(rec)
        return rec

    async def _warmup(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState
    ) -> None:
        cfg = self.config
        point = state.point
        if cfg.warmup_seconds:  # by time (the count is then ignored): the point's width, a deadline
            width = point.concurrency or max(1, math.ceil(point.request_rate))
            queue: Any = itertools.count()
            deadline = time.perf_counter() + cfg.warmup_seconds
        else:
            width = min(cfg.warmup, point.concurrency or cfg.warmup)
            queue = iter(range(cfg.warmup))
            deadline = math.inf
        done: list[RequestRecord] = []

        async def worker() -> None:
            for i in queue:
                if time.perf_counter() >= deadline:
                    return
                done.append(await self._one(session, workload, -1 - i, warmup=True))
                state.warmup_done = len(done)

        await asyncio.gather(*(worker() for _ in range(width)))
        self._write(point, done, time.perf_counter())

    async def _closed_loop(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState
    ) -> None:
        """``concurrency`` workers, each sending its next request (or conversation) when its
        last one ends. Every request arrives at the point's start, as in vLLM with an infinite
        rate: its queue time is the wait for a free worker."""
        point = state.point
        stop_at = state.started + point.duration_seconds if point.duration_seconds else math.inf

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                index = state.claimed
                if state.requests and index >= state.requests:
                    return
                state.claimed += 1
                if self.multi_turn:
                    await self._conversation(session, workload, state, index, state.started)
                else:
                    planned = state.first_wave.pop(index, None) or workload.request(index)
                    rec = self._record(planned, False)
                    rec.arrived = state.started
                    self._done(state, await self._send(session, planned.body, rec))

        await asyncio.gather(*(worker() for _ in range(point.concurrency)))

    async def _conversation(
        self,
        session: aiohttp.ClientSession,
        workload: Workload,
        state: PointState,
        index: int,
        arrived: float,
    ) -> None:
        """One conversation: each turn is sent only after the previous answer has ended (and
        the think time passed); its prompt is the whole history plus the new message."""
        cfg = self.config
        turns = self.dataset.conversation(state.point.index, index)
        history: list[tuple[str, str]] = []
        for t, turn in enumerate(turns):
            history.append(("user", turn.text))
            if cfg.api == "chat":
                messages = [{"role": r, "content": c} for r, c in history]
                body = workload.body(turn.output_len, messages=messages)
            else:
                body = workload.body(turn.output_len, text="\n".join(c for _, c in history))
            planned = PlannedRequest(
                index * cfg.turns + t, turn.input_len, turn.output_len, body,
                0 if cfg.prefix_len else None, t, index,
            )  # fmt: skip
            rec = self._record(planned, False)
            rec.arrived = arrived
            await self._send(session, body, rec)
            self._done(state, rec)
            if not rec.ok:
                return  # the rest of the conversation has no history to build on
            history.append(("assistant", "".join(rec.text or [])))
            if cfg.think_time_s and t + 1 < len(turns):
                await asyncio.sleep(cfg.think_time_s)
            arrived = time.perf_counter()

    def _offsets(self, state: PointState) -> list[float] | None:
        """Arrival offsets of an open loop (None: bounded by duration, generated lazily)."""
        cfg, point = self.config, state.point
        if cfg.timed_trace:
            count = state.requests or self.dataset.size
            offsets = [self.dataset.arrival(i) for i in range(count)]
            if point.duration_seconds:
                offsets = [t for t in offsets if t < point.duration_seconds]
            return offsets
        return None

    def _planned(self, state: PointState) -> float:
        """Seconds from the clock's start to the last request's arrival, where a schedule fixes
        it: a timed trace, or an open loop of a counted number of requests; else 0."""
        cfg, point = self.config, state.point
        if point.concurrency or cfg.ramp:
            return 0.0
        offsets = self._offsets(state)
        if offsets is None and point.request_rate and state.requests:
            offsets = list(self._arrivals(state))
        return max(offsets) if offsets else 0.0

    def _arrivals(self, state: PointState) -> Iterator[float]:
        cfg, point = self.config, state.point
        offsets = self._offsets(state)
        if offsets is not None:
            return iter(offsets)
        if cfg.ramp:
            return ramp_offsets(
                cfg.ramp, cfg.ramp_start_rate, cfg.ramp_end_rate, cfg.burstiness, cfg.seed,
                state.requests, point.duration_seconds,
            )  # fmt: skip
        return arrival_offsets(
            point.request_rate, cfg.burstiness, cfg.seed, state.requests, point.duration_seconds
        )

    async def _open_loop(
        self, session: aiohttp.ClientSession, workload: Workload, state: PointState
    ) -> None:
        point = state.point
        tasks: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(point.max_concurrency) if point.max_concurrency else None

        async def one(index: int, due: float) -> None:
            if slots is not None:
                await slots.acquire()
            try:
                began = max(due, time.perf_counter()) if slots is not None else due
                if self.multi_turn:
                    await self._conversation(session, workload, state, index, due)
                    return
                planned = workload.request(index)
                rec = self._record(planned, False, scheduled=began)
                rec.arrived = due
                await self._send(session, planned.body, rec)
                self._done(state, rec)
            finally:
                if slots is not None:
                    slots.release()

        for index, offset in enumerate(self._arrivals(state)):
            due = state.started + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.get_running_loop().create_task(one(index, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            state.claimed += 1
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
        warming = state.warmup_done if state.phase == "warmup" and self.config.warmup else None
        total = state.requests * (self.config.turns if self.multi_turn else 1)
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
                requests_done=warming if warming is not None else len(state.records),
                requests_total=self.config.warmup if warming is not None else total,
                errors=state.errors,
                output_tokens_per_second=tokens / elapsed if elapsed > 0 else 0.0,
                elapsed_seconds=elapsed,
                output_tokens_total=self.live.output_tokens,
                requests_by_outcome=dict(self.outcomes),
                at=time.time(),
                planned_seconds=state.planned_seconds,
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
            "max_concurrency": point.concurrency or point.max_concurrency or None,
            "point_index": point.index,
            "concurrency": point.concurrency,
            "requests_planned": state.requests,
            "conversations_planned": state.requests if self.multi_turn else None,
            "max_concurrency_open_loop": point.max_concurrency or None,
            "ramp": (
                {
                    "strategy": cfg.ramp,
                    "start_rate": cfg.ramp_start_rate,
                    "end_rate": cfg.ramp_end_rate,
                }
                if cfg.ramp
                else None
            ),
            "dataset": cfg.dataset,
            "clock_start": state.clock_start,
            "connections_warmed": state.connections_warmed,
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
