"""Generation requests: parse an OpenAI request, then stream its chunks on a deadline schedule.

Chunk ``j`` (0-based) leaves at ``arrival + TTFT + j·D`` computed from the arrival time each
time, never by adding sleeps, so a late write does not delay the ones after it; with the serving
model on (``batching.BatchEngine``), at the end of the engine step that produced it. Each chunk
carries ``tokens_per_chunk`` tokens (the last one the rest). Output text is made of plain words
that need no JSON escaping, so chunks are assembled from string pieces without ``json.dumps``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from tunelab.bench.simulator.batching import BatchEngine
from tunelab.bench.simulator.http import Connection
from tunelab.bench.simulator.metrics import SimMetrics
from tunelab.bench.simulator.options import Fault, SimSettings
from tunelab.bench.simulator.timing import DeadlineScheduler, LatenessStats

_WORD_LIST = (
    "the of and to in is it you that he was for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your "
    "how said an each she which do their time if will way about many then them write would"
)
WORDS = tuple(f" {w}" for w in _WORD_LIST.split(" "))
CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 4  # role markers a chat template adds around each message


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class GenRequest:
    chat: bool
    max_tokens: int
    prompt_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    ignore_eos: bool
    min_tokens: int

    def output_tokens(self, eos_after: int) -> int:
        """Tokens generated: ``max_tokens``, or fewer when EOS comes first and is not ignored."""
        if eos_after > 0 and not self.ignore_eos:
            return min(self.max_tokens, max(eos_after, self.min_tokens))
        return self.max_tokens


def _prompt_tokens(value: Any, field: str) -> int:
    """Words of a prompt: a string, token ids, or chat content parts (``{"type": "text"}``)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list) and all(isinstance(t, int) for t in value):
        return len(value)
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return sum(len(str(p.get("text", "")).split()) for p in value)
    raise BadRequest(f"{field} must be a string, a list of token ids or of content parts")


def parse_generation(body: bytes, chat: bool, settings: SimSettings) -> GenRequest:
    """The fields of a completions or chat request that shape the answer; BadRequest if wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        prompt = 0
        for i, message in enumerate(messages):
            content = message.get("content", "") if isinstance(message, dict) else None
            prompt += _prompt_tokens(content, f"messages[{i}].content")
            prompt += CHAT_TEMPLATE_TOKENS_PER_MESSAGE
        max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    else:
        prompt = _prompt_tokens(data.get("prompt"), "prompt")
        max_tokens = data.get("max_tokens")
    if max_tokens is None:
        max_tokens = settings.default_max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest("max_tokens must be a positive integer")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object")
    return GenRequest(
        chat=chat,
        max_tokens=max_tokens,
        prompt_tokens=prompt,
        stream=bool(data.get("stream", False)),
        include_usage=settings.usage != "none" and bool(options.get("include_usage")),
        continuous_usage=settings.usage == "continuous"
        and bool(options.get("continuous_usage_stats")),
        ignore_eos=bool(data.get("ignore_eos", False)),
        min_tokens=int(data.get("min_tokens") or 0),
    )


def _text(start: int, count: int) -> str:
    n = len(WORDS)
    return "".join(WORDS[(start + i) % n] for i in range(count))


class Generation:
    """One request's answer, streamed or whole, written by loop timers (no task per request)."""

    def __init__(
        self,
        conn: Connection,
        req: GenRequest,
        settings: SimSettings,
        metrics: SimMetrics,
        lateness: LatenessStats,
        scheduler: DeadlineScheduler,
        request_id: str,
        fault: Fault | None,
        arrival: float,
        batch: BatchEngine | None = None,
    ) -> None:
        self.loop = scheduler.loop
        self.scheduler = scheduler
        self.arrival = arrival  # when the request was read, so parsing it is inside the TTFT
        self.conn = conn
        self.req = req
        self.metrics = metrics
        self.lateness = lateness
        self.request_id = request_id
        self.fault = fault
        self.ttft = settings.ttft_ms / 1000.0
        self.itl = settings.itl_ms / 1000.0 * metrics.script.slowdown(arrival)
        self.per_chunk = settings.tokens_per_chunk
        self.role_at = settings.role_chunk_ms / 1000.0 if settings.role_chunk_ms >= 0 else -1.0
        self.drop_after = settings.drop_after_chunks
        self.total = req.output_tokens(settings.eos_after)
        self.chunks = math.ceil(self.total / self.per_chunk)
        self.sent_tokens = 0
        self.next_chunk = 0
        self.last_write = 0.0
        self.role_sent = False
        self.done = False
        self.batch = batch
        self.counted = ""  # the metrics gauge it is counted in: running, waiting or none
        created = int(time.time())
        model = json.dumps(settings.model)
        self.model_json = model
        if req.chat:
            self.prefix = (
                f'{{"id":"chatcmpl-{request_id}","object":"chat.completion.chunk",'
                f'"created":{created},"model":{model},"choices":[{{"index":0,"delta":'
            )
        else:
            self.prefix = (
                f'{{"id":"cmpl-{request_id}","object":"text_completion","created":{created},'
                f'"model":{model},"choices":[{{"index":0,"text":'
            )
        kind = "chat.completion.chunk" if req.chat else "text_completion"
        self.usage_prefix = (
            f'{{"id":"{request_id}","object":"{kind}",'
            f'"created":{created},"model":{model},"choices":[],"usage":'
        )

    # what the batch engine needs ----------------------------------------------------------------
    @property
    def prompt_work(self) -> int:
        return max(1, self.req.prompt_tokens)

    @property
    def kv_tokens(self) -> int:
        return self.req.prompt_tokens + self.total

    def admitted(self) -> None:
        self.counted = "running"

    def step_chunk(self, deadline: float) -> None:
        """The engine's step that produced this request's next chunk ended at ``deadline``."""
        if self.done:
            return
        if self.req.stream:
            self._emit(deadline)
            return
        self.next_chunk += 1
        if self.next_chunk >= self.chunks:
            self._whole(deadline)

    # schedule ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.metrics.prompt_tokens += self.req.prompt_tokens
        self.conn.on_close(self.cancel)
        if self.fault is not None and self.fault.kind == "hang":
            self.metrics.running += 1
            self.counted = "running"
            return  # hold the connection, answer nothing
        if self.batch is None:
            self.metrics.running += 1
            self.counted = "running"
        if self.req.stream:
            self.conn.start_stream(extra_headers={"x-request-id": self.request_id})
            if self.req.chat and self.role_at >= 0:
                self.scheduler.at(self.arrival + self.role_at, self._role_only)
        if self.batch is not None:
            self.counted = "waiting"  # the engine counts it there, then in running
            self.batch.submit(self)
        elif self.req.stream:
            self.scheduler.at(self.arrival + self.ttft, self._emit_fixed)
        else:
            self.scheduler.at(self.arrival + self.ttft + (self.chunks - 1) * self.itl, self._whole)

    def cancel(self) -> None:
        """The client went away: stop writing and count the request as aborted."""
        self._finish("abort")  # pending timers see ``done`` and do nothing

    def _finish(self, reason: str) -> None:
        if self.done:
            return
        self.done = True
        if self.counted == "running":
            self.metrics.running -= 1
        elif self.counted == "waiting":
            self.metrics.waiting -= 1
        self.counted = ""
        self.metrics.finished[reason] = self.metrics.finished.get(reason, 0) + 1
        if reason != "abort":
            self.metrics.e2e.observe(self.loop.time() - self.arrival)

    # writers ----------------------------------------------------------------------------------
    def _usage(self, completion: int) -> str:
        p = self.req.prompt_tokens
        return (
            f'{{"prompt_tokens":{p},"completion_tokens":{completion},'
            f'"total_tokens":{p + completion}}}'
        )

    def _role_only(self) -> None:
        if self.done or self.role_sent or self.conn.closed:
            return
        self.role_sent = True
        event = self.prefix + '{"role":"assistant","content":""},"finish_reason":null}]'
        if self.req.continuous_usage:
            event += ',"usage":' + self._usage(0)
        self.conn.send_chunk(("data: " + event + "}\n\n").encode())

    def _emit_fixed(self) -> None:
        """The fixed schedule: chunk j at arrival + TTFT + j·ITL."""
        if self.done:
            return
        self._emit(self.arrival + self.ttft + self.next_chunk * self.itl)
        if not self.done:
            self.scheduler.at(
                self.arrival + self.ttft + self.next_chunk * self.itl, self._emit_fixed
            )

    def _emit(self, deadline: float) -> None:
        """Write chunk ``next_chunk``, due at ``deadline``."""
        j = self.next_chunk
        now = self.loop.time()
        self.lateness.record(now - deadline)
        count = min(self.per_chunk, self.total - self.sent_tokens)
        text = _text(self.sent_tokens, count)
        self.sent_tokens += count
        last = self.sent_tokens >= self.total
        reason = ("length" if self.total == self.req.max_tokens else "stop") if last else None
        finish = f'"{reason}"' if reason else "null"
        out = ""
        if self.req.chat:
            if not self.role_sent:
                self.role_sent = True
                role = self.prefix + '{"role":"assistant","content":""},"finish_reason":null}]'
                if self.req.continuous_usage:
                    role += ',"usage":' + self._usage(0)
                out += "data: " + role + "}\n\n"
            event = self.prefix + f'{{"content":"{text}"}},"finish_reason":{finish}}}]'
        else:
            event = self.prefix + f'"{text}","logprobs":null,"finish_reason":{finish}}}]'
        if self.req.continuous_usage:
            event += ',"usage":' + self._usage(self.sent_tokens)
        out += "data: " + event + "}\n\n"
        if self.fault is not None and self.fault.kind == "malformed" and j == min(1, self.chunks):
            out = 'data: {"choices":[{"index":0,"text":\n\n' + out
        if last:
            if self.req.include_usage:
                out += "data: " + self.usage_prefix + self._usage(self.sent_tokens) + "}\n\n"
            out += "data: [DONE]\n\n"
        self._account(now, count)
        if last:
            self.conn.end_stream(out.encode())
            self._finish(reason or "length")
            return
        self.conn.send_chunk(out.encode())
        self.next_chunk = j + 1
        if self.fault is not None and self.fault.kind == "drop" and j + 1 >= self.drop_after:
            self.conn.close()
            self._finish("abort")

    def _account(self, now: float, tokens: int) -> None:
        if self.last_write == 0.0:
            self.metrics.ttft.observe(now - self.arrival)
        else:
            self.metrics.itl.observe(now - self.last_write)
        self.last_write = now
        self.metrics.generation_tokens += tokens
        self.metrics.served(self.arrival, now)

    def _whole(self, deadline: float | None = None) -> None:
        """The whole answer, due at ``deadline`` (the fixed schedule's when None)."""
        if self.done:
            return
        now = self.loop.time()
        if deadline is None:
            deadline = self.arrival + self.ttft + (self.chunks - 1) * self.itl
        self.lateness.record(now - deadline)
        text = _text(0, self.total)
        reason = "length" if self.total == self.req.max_tokens else "stop"
        if self.req.chat:
            choice = (
                f'{{"index":0,"message":{{"role":"assistant","content":"{text}"}},'
                f'"finish_reason":"{reason}"}}'
            )
            kind = "chat.completion"
        else:
            choice = f'{{"index":0,"text":"{text}","logprobs":null,"finish_reason":"{reason}"}}'
            kind = "text_completion"
        body = (
            f'{{"id":"{self.request_id}","object":"{kind}","created":{int(time.time())},'
            f'"model":{self.model_json},'
            f'"choices":[{choice}],"usage":{self._usage(self.total)}}}'
        )
        self.metrics.generation_tokens += self.total
        self.metrics.served(self.arrival, now)
        self.metrics.ttft.observe(now - self.arrival)
        self.conn.send_response(200, body.encode(), extra_headers={"x-request-id": self.request_id})
        self._finish(reason)


def error_body(status: int, message: str) -> bytes:
    kind = "rate_limit_exceeded" if status == 429 else "server_error"
    return json.dumps(
        {"error": {"message": message, "type": kind, "code": status}, "object": "error"}
    ).encode()
