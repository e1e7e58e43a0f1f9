"""A small torch inference server for the H200 profile under the agent (issue 27).

Not an engine: a stand-in that does what one does per decode step, on the GPU, for real. An
engine thread batches every running request (continuous batching, up to ``--max-batch``) and per
step runs ``--layers`` transformer layers at batch B: the QKV, output and MLP GEMMs of a
``--hidden``-wide model and SDPA attention of one new token over a ``--context``-token KV cache,
each step wrapped in ``record_function("execute_model")`` (vLLM's step marker); then every
running request gets one token. It speaks enough of the OpenAI API for tunelab's load generator
(``POST /v1/completions``, streamed with continuous usage; ``GET /v1/models``; ``GET /health``).

Profiling is the generic engine's contract: ``POST /start_profile`` starts ``torch.profiler``
(CPU and CUDA) in the engine thread, ``POST /stop_profile`` stops it and writes the Chrome trace,
gzipped, into ``$TUNELAB_PROFILE_DIR`` (the folder the agent chose), and torch's own
``key_averages()`` of the same profile to ``--key-averages`` (outside the trace folder), so the
two can be set side by side. Run by ``benchmarks/profile_under_agent.py``; needs torch + CUDA.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import queue
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.profile_capture import key_averages  # torch is imported lazily

MODEL = "torch-decode"


@dataclass
class Request:
    max_tokens: int
    tokens: queue.Queue[int | None] = field(default_factory=queue.Queue)
    sent: int = 0


@dataclass
class Command:
    name: str  # start | stop
    done: threading.Event = field(default_factory=threading.Event)
    status: int = 200
    message: str = ""


class Engine:
    """The one thread that touches the GPU: batches, steps, and runs the profiler."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.pending: queue.Queue[Request] = queue.Queue()
        self.commands: queue.Queue[Command] = queue.Queue()
        self.running: list[Request] = []
        self.profiler: Any = None
        self.traces = 0
        torch.manual_seed(0)
        self.device = args.device
        dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
        h, layers = args.hidden, args.layers
        heads, ctx, batch = args.heads, args.context, args.max_batch
        scale = h**-0.5

        def weight(rows: int, cols: int) -> Any:
            return torch.randn(rows, cols, device=self.device, dtype=dtype) * scale

        self.layers = [
            (weight(h, 3 * h), weight(h, h), weight(h, 4 * h), weight(4 * h, h))
            for _ in range(layers)
        ]
        shape = (batch, heads, ctx, h // heads)
        self.kv = [
            tuple(torch.randn(shape, device=self.device, dtype=dtype) for _ in "kv")
            for _ in range(layers)
        ]
        self.x = torch.randn(batch, h, device=self.device, dtype=dtype)
        for b in (1, batch):  # warm-up: cuBLAS and cuDNN choose their kernels outside any trace
            self.step(b)
        self.sync()

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def step(self, b: int) -> None:
        torch = self.torch
        functional = torch.nn.functional
        h, heads = self.args.hidden, self.args.heads
        x = self.x[:b]
        for (w_qkv, w_out, w_up, w_down), (k, v) in zip(self.layers, self.kv, strict=True):
            q, _, _ = (x @ w_qkv).split(h, dim=-1)
            q = q.reshape(b, heads, 1, h // heads)
            a = functional.scaled_dot_product_attention(q, k[:b], v[:b])
            x = x + a.reshape(b, h) @ w_out
            x = functional.rms_norm(x, (h,))
            x = x + functional.silu(x @ w_up) @ w_down
        self.x[:b] = x.clamp(-1, 1)

    def loop(self) -> None:
        torch = self.torch
        while True:
            self._commands()
            while len(self.running) < self.args.max_batch:
                try:
                    self.running.append(self.pending.get_nowait())
                except queue.Empty:
                    break
            if not self.running:
                try:
                    self.running.append(self.pending.get(timeout=0.02))
                except queue.Empty:
                    continue
            with torch.profiler.record_function("execute_model"):
                self.step(len(self.running))
                self.sync()
            still = []
            for request in self.running:
                request.sent += 1
                request.tokens.put(request.sent)
                if request.sent >= request.max_tokens:
                    request.tokens.put(None)
                else:
                    still.append(request)
            self.running = still

    def _commands(self) -> None:
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return
            try:
                if command.name == "start":
                    self._start()
                else:
                    self._stop()
            except Exception as exc:  # reported to the caller as a 500
                command.status, command.message = 500, f"{type(exc).__name__}: {exc}"
            command.done.set()

    def _start(self) -> None:
        if self.profiler is not None:
            raise RuntimeError("the profiler is already running")
        activities = [self.torch.profiler.ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(self.torch.profiler.ProfilerActivity.CUDA)
        self.profiler = self.torch.profiler.profile(activities=activities)
        self.profiler.__enter__()

    def _stop(self) -> None:
        if self.profiler is None:
            raise RuntimeError("the profiler is not running")
        profiler, self.profiler = self.profiler, None
        self.sync()
        profiler.__exit__(None, None, None)
        self.traces += 1
        folder = Path(os.environ.get("TUNELAB_PROFILE_DIR") or self.args.trace_dir)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{socket.gethostname()}_{os.getpid()}.{self.traces}.pt.trace.json"
        raw = folder / f".{name}.tmp"
        profiler.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(folder / f"{name}.gz", "wb", 6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        if self.args.key_averages:
            rows = key_averages(profiler)
            gpu = self.torch.cuda.get_device_name(0) if self.device == "cuda" else "CPU"
            meta = {"torch": self.torch.__version__, "gpu": gpu}
            Path(self.args.key_averages).write_text(json.dumps({"meta": meta, "rows": rows}))

    def command(self, name: str, timeout: float = 120.0) -> Command:
        command = Command(name)
        self.commands.put(command)
        if not command.done.wait(timeout):
            command.status, command.message = 504, "the engine did not answer"
        return command


def handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            if self.path in ("/start_profile", "/stop_profile"):
                done = engine.command(self.path[1:].split("_")[0])
                self._send(done.status, {"message": done.message})
            elif self.path == "/v1/completions":
                self._complete(body)
            else:
                self._send(404, {"error": "not found"})

        def _chunk(self, text: str) -> None:
            data = text.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        def _complete(self, body: dict[str, Any]) -> None:
            request = Request(max(1, int(body.get("max_tokens") or 16)))
            prompt = len(str(body.get("prompt", "")).split())
            engine.pending.put(request)
            if not body.get("stream"):
                while request.tokens.get() is not None:
                    pass
                usage = {"prompt_tokens": prompt, "completion_tokens": request.sent}
                choice = {"index": 0, "text": " x" * request.sent, "finish_reason": "length"}
                self._send(200, {"object": "text_completion", "model": MODEL,
                                 "choices": [choice], "usage": usage})  # fmt: skip
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            head = {"id": f"cmpl-{id(request)}", "object": "text_completion", "model": MODEL}
            while (count := request.tokens.get()) is not None:
                last = count >= request.max_tokens
                choice = {"index": 0, "text": " x", "finish_reason": "length" if last else None}
                usage = {"prompt_tokens": prompt, "completion_tokens": count,
                         "total_tokens": prompt + count}  # fmt: skip
                self._chunk(
                    f"data: {json.dumps({**head, 'choices': [choice], 'usage': usage})}\n\n"
                )
                self.wfile.flush()
            self._chunk("data: [DONE]\n\n")
            self._chunk("")
            self.wfile.flush()

    return Handler


class Server(ThreadingHTTPServer):
    """The standard library listens with a backlog of 5: at concurrency 1024 the connects
    overflow it, stall in SYN retries (1 s, 3 s, 7 s) and some are reset (an H100 run, issue 35)."""

    request_queue_size = 4096
    daemon_threads = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run")
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--trace-dir", default="traces", help="without TUNELAB_PROFILE_DIR")
    parser.add_argument("--key-averages", default="", help="write key_averages() JSON here")
    args = parser.parse_args(argv)
    print("loading: building the model on the GPU", flush=True)
    engine = Engine(args)
    threading.Thread(target=engine.loop, name="engine", daemon=True).start()
    server = Server(("127.0.0.1", args.port), handler(engine))
    print(f"serving {MODEL} on 127.0.0.1:{args.port}", flush=True)
    started = time.monotonic()
    try:
        server.serve_forever()
    finally:
        print(f"served {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
