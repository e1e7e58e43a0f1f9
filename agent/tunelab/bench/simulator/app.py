"""The simulator process: routes, fake loading, signal handling.

Routes: ``/health`` (503 while loading, then 200), ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``, ``/metrics`` (vLLM names) and ``/sim/stats`` (how late the writes were,
for the client-accuracy benchmark); the profiler and cache endpoints of ``profiler.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import TextIO

from tunelab.bench.fdlimit import raise_fd_limit
from tunelab.bench.simulator.batching import BatchEngine
from tunelab.bench.simulator.engine import BadRequest, Generation, error_body, parse_generation
from tunelab.bench.simulator.http import Connection, Request
from tunelab.bench.simulator.metrics import SimMetrics
from tunelab.bench.simulator.options import SimSettings, add_sim_arguments, settings_from_args
from tunelab.bench.simulator.phases import Script
from tunelab.bench.simulator.profiler import SimProfiler
from tunelab.bench.simulator.timing import DeadlineScheduler, LatenessStats, new_event_loop

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LISTEN_BACKLOG = 4096  # a closed loop of 1024 connects at once; asyncio's default is 100
PROGRESS_LABEL = "Loading safetensors checkpoint shards"


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"


def progress_line(done: int, total: int, elapsed: float, per_item: float) -> str:
    """One SGLang/tqdm-style line: ``...:  54% Completed | 45/83 [00:14<00:13,  3.13it/s]``."""
    rate = done / elapsed if elapsed > 0 else 0.0
    remaining = (total - done) * per_item
    pct = int(100 * done / total)
    return (
        f"{PROGRESS_LABEL}: {pct:3d}% Completed | {done}/{total} "
        f"[{_clock(elapsed)}<{_clock(remaining)}, {rate:5.2f}it/s]"
    )


class StartupOOM(Exception):
    """The simulated engine ran out of GPU memory while starting (``--oom-above-seqs``)."""


GIB = 1024**3
GPU_TOTAL_GIB = 139.72  # what an H200 reports
KV_GIB_PER_SEQ = 0.5  # a made-up KV reservation per batch slot, for a plausible message


def oom_lines(settings: SimSettings) -> list[str]:
    """What SGLang prints when its scheduler cannot allocate at start-up (captured from a real
    run: tests/fixtures/engines/sglang-cuda-oom.log); the agent's CUDA_OOM signature matches the
    ``torch.OutOfMemoryError`` line."""
    seqs = settings.max_num_seqs or 0
    limit = settings.oom_above_seqs or 0
    want = max(0.01, (seqs - limit) * KV_GIB_PER_SEQ)
    free = 1.01
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return [
        f"[{stamp} TP0] Capturing batches (max_num_seqs={seqs}) ...",
        f"[{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):",
        (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {want:.2f} GiB. "
            f"GPU 0 has a total capacity of {GPU_TOTAL_GIB:.2f} GiB of which {free:.2f} GiB "
            "is free."
        ),
        f"[{stamp}] Received sigquit from a child process. It usually means the child failed.",
    ]


class SimApp:
    """Routes requests to the generation engine; holds the shared counters."""

    def __init__(self, settings: SimSettings, out: TextIO) -> None:
        self.settings = settings
        self.scheduler = DeadlineScheduler(asyncio.get_running_loop())
        self.out = out
        self.ready = False
        self.lateness = LatenessStats()
        self.metrics = SimMetrics(
            settings.model,
            self.lateness,
            Script(settings.phases),
            asyncio.get_running_loop().time,
        )
        self.requests = 0
        self.started = time.time()
        self._tasks: set[asyncio.Task[None]] = set()
        self.profiler = SimProfiler.from_flag(
            settings.profiler_config, settings.profile_stop_delay, settings.profile_trace_pad
        )
        self.batch = (
            BatchEngine(settings, self.scheduler, self.metrics) if settings.batching else None
        )

    def handle(self, request: Request, conn: Connection) -> None:
        routes = {
            "/health": self._health,
            "/health_generate": self._health,
            "/v1/models": self._models,
            "/metrics": self._metrics,
            "/sim/stats": self._stats,
        }
        if request.path in ("/v1/completions", "/v1/chat/completions"):
            if request.method != "POST":
                conn.send_response(405, error_body(405, "use POST"))
                return
            self._generate(request, conn, chat=request.path.endswith("chat/completions"))
            return
        if request.path in ("/tokenize", "/detokenize"):
            if request.method != "POST":
                conn.send_response(405, error_body(405, "use POST"))
                return
            status, body = self._tokenize(request.path, request.body)
            conn.send_response(status, body)
            return
        if request.path in self._posts():
            if request.method != "POST":
                conn.send_response(405, error_body(405, "use POST"))
                return
            task = asyncio.get_running_loop().create_task(self._post(request.path, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        route = routes.get(request.path)
        if route is None:
            conn.send_response(404, error_body(404, f"no route {request.path}"))
        elif request.method not in ("GET", "HEAD"):
            conn.send_response(405, error_body(405, "use GET"))
        else:
            route(conn)

    def _tokenize(self, path: str, raw: bytes) -> tuple[int, bytes]:
        """vLLM's /tokenize and /detokenize, enough for a client that renders the chat template
        through the server: a "token" is one character's code point. /tokenize with
        ``messages`` renders ``--chat-template`` (400 without one, as vLLM for a model with
        no template); with ``prompt`` it takes the text as it is."""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return 400, error_body(400, "the body is not JSON")
        if not isinstance(body, dict):
            return 400, error_body(400, "the body is not a JSON object")
        if path == "/detokenize":
            tokens = body.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                return 400, error_body(400, "tokens: a list of integers")
            return 200, json.dumps({"prompt": "".join(chr(t) for t in tokens)}).encode()
        if "messages" in body:
            if not self.settings.chat_template:
                return 400, error_body(400, "this model has no chat template")
            users = [m.get("content", "") for m in body["messages"] if isinstance(m, dict)]
            text = self.settings.chat_template.replace("{prompt}", "\n".join(map(str, users)))
        else:
            text = str(body.get("prompt", ""))
        tokens = [ord(c) for c in text]
        return 200, json.dumps({"tokens": tokens, "count": len(tokens)}).encode()

    def _posts(self) -> set[str]:
        paths = {"/flush_cache"}
        if self.profiler.trace_dir:
            paths |= {"/start_profile", "/stop_profile"}
        if self.profiler.dev_mode:
            paths.add("/reset_prefix_cache")
        return paths

    async def _post(self, path: str, conn: Connection) -> None:
        if path == "/start_profile":
            status, error = self.profiler.start()
        elif path == "/stop_profile":
            status, error = await self.profiler.stop()
        else:
            self.profiler.resets += 1
            status, error = 200, ""
        if conn.closed:
            return
        conn.send_response(status, error_body(status, error) if error else b"", "text/plain")

    def _health(self, conn: Connection) -> None:
        conn.send_response(200 if self.ready else 503, b"", "text/plain")

    def _models(self, conn: Connection) -> None:
        if not self.ready and not self.settings.models_while_loading:
            conn.send_response(503, error_body(503, "loading"))
            return
        body = {
            "object": "list",
            "data": [
                {
                    "id": self.settings.model,
                    "object": "model",
                    "created": int(self.started),
                    "owned_by": "tunelab-sim",
                    "root": self.settings.model,
                    "max_model_len": 131072,
                }
            ],
        }
        conn.send_response(200, json.dumps(body).encode())

    def _metrics(self, conn: Connection) -> None:
        kind = self.settings.metrics_fault
        body = self.metrics.render()
        if kind == "huge":  # past any scraper's cap: 40 MiB of valid-looking series
            line = b'vllm:num_requests_running{model_name="%d"} 1\n'
            body += b"".join(line % i for i in range(40 * 1024 * 1024 // len(line)))
        elif kind == "malformed":
            body = b"vllm:num_requests_running{model_name=unquoted} one\n\x00\xff garbage\n"
        if kind == "slow":  # answers after 5 s; generation keeps going meanwhile
            asyncio.get_running_loop().call_later(5.0, conn.send_response, 200, body, METRICS_TYPE)
            return
        conn.send_response(200, body, METRICS_TYPE)

    def _stats(self, conn: Connection) -> None:
        body = {
            "ready": self.ready,
            "requests": self.requests,
            "running": self.metrics.running,
            "waiting": self.metrics.waiting,
            "generation_tokens": self.metrics.generation_tokens,
            "served": self.metrics.window(),
            "write_lateness": self.lateness.summary(),
            **self.profiler.stats(),
        }
        if self.batch is not None:
            stats = self.batch.stats
            body["steps"] = {
                "count": stats.steps,
                "busy_seconds": stats.busy_seconds,
                "prefill_tokens": stats.prefill_tokens,
                "max_running": stats.max_running,
                "last_ms": stats.durations_ms,
            }
        conn.send_response(200, json.dumps(body).encode())

    def _generate(self, request: Request, conn: Connection, chat: bool) -> None:
        if not self.ready:
            conn.send_response(503, error_body(503, "the model is still loading"))
            return
        try:
            req = parse_generation(request.body, chat, self.settings)
        except BadRequest as exc:
            conn.send_response(400, error_body(400, str(exc)))
            return
        if self.batch is not None:
            refusal = self.batch.refusal(
                req.prompt_tokens + req.output_tokens(self.settings.eos_after)
            )
            if refusal is not None:
                conn.send_response(400, error_body(400, refusal))
                return
        self.requests += 1
        fault = self.settings.fault_for(self.requests)
        if fault is not None:
            errs = self.metrics.errors_injected
            errs[fault.kind] = errs.get(fault.kind, 0) + 1
            if fault.status is not None:
                conn.send_response(fault.status, error_body(fault.status, "injected fault"))
                return
        self.metrics.script.arrived(request.received)
        Generation(
            conn,
            req,
            self.settings,
            self.metrics,
            self.lateness,
            self.scheduler,
            f"{self.requests:08x}",
            fault,
            request.received,
            self.batch,
        ).start()

    async def load(self) -> None:
        """Print tqdm-style shard progress (``\\r`` redraws) for ``startup_seconds``, then ready
        (or, with ``--max-num-seqs`` above ``--oom-above-seqs``, raise :class:`StartupOOM`)."""
        total = self.settings.shards
        duration = self.settings.startup_seconds
        per_item = duration / total
        start = time.monotonic()
        for done in range(0 if duration > 0 else total, total + 1):
            elapsed = time.monotonic() - start
            end = "\n" if done == total else ""
            self.out.write("\r" + progress_line(done, total, elapsed, per_item) + end)
            self.out.flush()
            if done < total and per_item > 0:
                await asyncio.sleep(max(0.0, start + (done + 1) * per_item - time.monotonic()))
        if self.settings.fails_with_oom:
            for line in oom_lines(self.settings):
                self.out.write(line + "\n")
            self.out.flush()
            raise StartupOOM
        self.ready = True
        self.out.write("The server is fired up and ready to roll!\n")
        self.out.flush()


async def serve(settings: SimSettings, out: TextIO) -> None:
    loop = asyncio.get_running_loop()
    app = SimApp(settings, out)
    server = await loop.create_server(
        lambda: Connection(app.handle),
        host=settings.host,
        port=settings.port,
        backlog=LISTEN_BACKLOG,
        reuse_address=True,
    )
    port = server.sockets[0].getsockname()[1]
    if settings.batching:
        timing = (
            f"batching: step {settings.step_base_ms} + {settings.step_per_seq_ms}*running + "
            f"{settings.prefill_per_token_ms}*prefill_tokens ms, "
            f"max-num-seqs {settings.max_num_seqs or 'unlimited'}, "
            f"max-num-batched-tokens {settings.max_num_batched_tokens or 'unlimited'}, "
            f"kv-cache-tokens {settings.kv_cache_tokens or 'unlimited'}"
        )
    else:
        timing = f"ttft {settings.ttft_ms} ms, itl {settings.itl_ms} ms"
    out.write(
        f"tunelab-sim {settings.model}: listening on http://{settings.host}:{port} "
        f"({timing}, {settings.tokens_per_chunk} tokens/chunk)\n"
    )
    out.flush()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loading = asyncio.create_task(app.load())
    stopping = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if loading in done:
            loading.result()  # raises StartupOOM when the simulated start-up failed
        await stopping
    finally:
        loading.cancel()
        stopping.cancel()
        server.close()
        out.write("tunelab-sim: shutting down\n")
        out.flush()


def run(settings: SimSettings, out: TextIO | None = None) -> int:
    """Serve until SIGTERM/SIGINT on an event loop with sub-millisecond timers."""
    raise_fd_limit()
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(settings, out if out is not None else sys.stderr))
    except StartupOOM:
        return 1
    except OSError as exc:
        print(f"tunelab-sim: cannot listen on {settings.host}:{settings.port}: {exc}", file=out)
        return 1
    finally:
        loop.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tunelab.bench.simulator",
        description="An OpenAI-compatible inference-server simulator with exact timing.",
    )
    add_sim_arguments(parser)
    return run(settings_from_args(parser.parse_args(argv)))
