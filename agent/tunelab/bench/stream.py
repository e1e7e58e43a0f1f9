"""One streaming request: send it, time every chunk as it arrives, classify how it failed.

A chunk *carries tokens* when it has text (``text``, or ``delta.content`` /
``reasoning_content`` / ``tool_calls`` in chat) or when continuous usage says its
``completion_tokens`` grew; a role-only first chat chunk carries none, so it neither sets TTFT
nor adds an ITL sample. Token counts come from ``usage``: per chunk when the server sends
continuous usage, else the final total, else one per chunk (flagged, and warned about).

Error kinds: ``http_<status>``, ``connect``, ``disconnected``, ``timeout``, ``malformed_stream``,
``stream_error`` (an error object inside the stream), ``incomplete`` (ended with no finish),
``no_output`` (finished with no token).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tunelab.bench.transport import read_marks, timed_pieces

JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
ERROR_BODY_BYTES = 300
MAX_USAGE_TOKENS = 100_000_000  # one request's tokens: far above any context length


class StreamFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class LiveCounters:
    """Shared by every request of a run: what the progress line reports while a point runs."""

    output_tokens: int = 0


@dataclass
class RequestRecord:
    index: int
    warmup: bool
    input_len: int  # requested
    max_tokens: int  # requested
    scheduled: float = 0.0  # perf_counter time it could begin (due, and a slot free), else start
    arrived: float = 0.0  # joined the client's queue (vLLM's arrival): due, or the point start
    group: int | None = None  # prefix group of its prompt
    turn: int | None = None  # multi-turn: 0-based turn
    conversation: int | None = None
    start: float = 0.0  # the client began the request (pool, connect, build, write)
    sent: float = 0.0  # its body was written to the socket: where TTFT and E2E start
    end: float = 0.0  # when the stream finished or failed
    chunk_times: list[float] = field(default_factory=list)  # perf_counter, token-bearing chunks
    chunk_tokens: list[int | None] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    token_source: str = ""  # usage_continuous | usage_final | chunks
    finish_reason: str | None = None
    error_kind: str | None = None
    error: str | None = None
    text: list[str] | None = None  # the generated text's pieces, kept only for --save-detailed

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def dispatched(self) -> float:
        return self.sent or self.start

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.dispatched

    @property
    def latency(self) -> float:
        """E2E: request written to the last token-bearing chunk."""
        return self.chunk_times[-1] - self.dispatched

    @property
    def queue_time(self) -> float:
        """vLLM's ``client_queue_time``: arrived → begun (waiting for a free slot)."""
        return self.start - (self.arrived or self.scheduled or self.start)

    def mark_sent(self, at: float) -> None:
        self.sent = at


class StreamParser:
    """Turns SSE bytes into timed, token-counted chunks on a :class:`RequestRecord`."""

    def __init__(self, record: RequestRecord, chat: bool, live: LiveCounters) -> None:
        self.record = record
        self.chat = chat
        self.live = live
        self.pending = b""
        self.done = False
        self.cumulative: int | None = None  # continuous usage's completion_tokens so far
        self.final_usage: dict[str, Any] | None = None
        self.saw_usage_per_chunk = True

    def feed(self, data: bytes, now: float) -> None:
        """Consume bytes that arrived at ``now`` (every event completed by them shares it)."""
        if self.pending:
            data = self.pending + data
        lines = data.split(b"\n")
        self.pending = lines.pop()
        payloads = []
        for line in lines:
            if not line or line == b"\r" or line[:1] == b":":
                continue  # event separator or SSE comment (keep-alive ping)
            if line[:5] != b"data:":
                if line.startswith((b"event:", b"id:", b"retry:")):
                    continue
                raise StreamFailure("malformed_stream", f"not an SSE line: {line[:80]!r}")
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
            else:
                payloads.append(payload)
        if payloads:
            for event in _decode(payloads):
                self._event(event, now)

    def _event(self, event: dict[str, Any], now: float) -> None:
        if "error" in event:
            raise StreamFailure("stream_error", str(event["error"])[:ERROR_BODY_BYTES])
        usage = event.get("usage")
        choices = event.get("choices")
        if not choices:
            if isinstance(usage, dict):
                self.final_usage = usage
            return
        choice = choices[0]
        if self.chat:
            delta = choice.get("delta") or {}
            text = (
                delta.get("content")
                or delta.get("reasoning_content")
                or delta.get("reasoning")
                or delta.get("tool_calls")
            )
        else:
            text = choice.get("text")
        tokens: int | None = None
        total = usage_count(usage, "completion_tokens")
        if isinstance(usage, dict) and total is not None:
            tokens = total - (self.cumulative or 0)
            self.cumulative = total
            self.final_usage = usage
        if text or (tokens is not None and tokens > 0):
            rec = self.record
            if rec.text is not None and isinstance(text, str):
                rec.text.append(text)
            rec.chunk_times.append(now)
            rec.chunk_tokens.append(tokens)
            if tokens is None:
                self.saw_usage_per_chunk = False
            self.live.output_tokens += tokens if tokens is not None else 1
        reason = choice.get("finish_reason")
        if reason:
            self.record.finish_reason = reason

    def finish(self) -> None:
        """Settle token counts once the stream has ended; raise if it ended badly."""
        rec = self.record
        if not self.done and rec.finish_reason is None:
            raise StreamFailure("incomplete", "stream ended without a finish_reason or [DONE]")
        if not rec.chunk_times:
            raise StreamFailure("no_output", "stream finished without any token")
        usage = self.final_usage
        chunks = len(rec.chunk_times)
        prompt = usage_count(usage, "prompt_tokens")
        if prompt is not None:
            rec.prompt_tokens = prompt
        total = usage_count(usage, "completion_tokens")
        if total is not None:
            rec.output_tokens = total
            if self.saw_usage_per_chunk and self.cumulative is not None:
                rec.token_source = "usage_continuous"  # noqa: S105 - not a secret
            else:
                rec.token_source = "usage_final"  # noqa: S105
                rec.chunk_tokens = [1] * chunks if rec.output_tokens == chunks else [None] * chunks
        else:
            rec.token_source = "chunks"  # noqa: S105
            rec.output_tokens = chunks
            rec.chunk_tokens = [1] * chunks


def usage_count(usage: Any, key: str) -> int | None:
    """``usage[key]`` when the server sent an integer, None when it sent none; a count outside
    0..MAX_USAGE_TOKENS (a server reporting 10**200 tokens) fails the request with the field
    named, so no statistic downstream ever sees it."""
    if not isinstance(usage, dict):
        return None
    value = usage.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not 0 <= value <= MAX_USAGE_TOKENS:
        shown = str(value) if len(str(value)) <= 24 else f"a {len(str(value))}-digit number"
        raise StreamFailure("bad_usage", f"usage.{key}: {shown} is outside 0..{MAX_USAGE_TOKENS:,}")
    return value


def _decode(payloads: list[bytes]) -> list[dict[str, Any]]:
    """Parse the events of one read. When a loaded client reads many at once, one
    ``json.loads`` over a JSON array of them saves most of the per-call overhead."""
    try:
        if len(payloads) == 1:
            events = [json.loads(payloads[0])]
        else:
            events = json.loads(b"[" + b",".join(payloads) + b"]")
    except ValueError:
        bad = next((p for p in payloads if not _is_json(p)), payloads[0])
        raise StreamFailure("malformed_stream", f"bad JSON in stream: {bad[:80]!r}") from None
    for event in events:
        if not isinstance(event, dict):
            raise StreamFailure("malformed_stream", "stream event is not a JSON object")
    return events


def _is_json(payload: bytes) -> bool:
    try:
        json.loads(payload)
    except ValueError:
        return False
    return True


async def send(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    record: RequestRecord,
    chat: bool,
    live: LiveCounters,
    timeout: aiohttp.ClientTimeout,
) -> RequestRecord:
    """Run one request to completion or failure; never raises for the server's faults."""
    parser = StreamParser(record, chat, live)
    record.start = time.perf_counter()
    if not record.scheduled:
        record.scheduled = record.start
    if not record.arrived:
        record.arrived = record.scheduled
    try:
        async with session.post(
            url,
            data=body,
            headers=JSON_HEADERS,
            timeout=timeout,
            trace_request_ctx=record.mark_sent,
        ) as resp:
            if resp.status != 200:
                text = (await resp.content.read(ERROR_BODY_BYTES)).decode("utf-8", "replace")
                raise StreamFailure(f"http_{resp.status}", text.strip())
            marks = read_marks(resp)
            consumed = 0
            async for data in resp.content.iter_any():
                for piece, at in timed_pieces(data, consumed, marks, time.perf_counter()):
                    parser.feed(piece, at)
                consumed += len(data)
                if parser.done:
                    break
            parser.finish()
    except StreamFailure as exc:
        _fail(record, exc.kind, str(exc))
    except TimeoutError:
        _fail(record, "timeout", f"nothing received for {timeout.sock_read} s")
    except aiohttp.ClientConnectorError as exc:
        _fail(record, "connect", str(exc))
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
        _fail(record, "disconnected", str(exc) or type(exc).__name__)
    except aiohttp.ClientResponseError as exc:
        _fail(record, "http_protocol", str(exc))
    except aiohttp.ClientError as exc:  # any other transport failure (reset, ...)
        _fail(record, "disconnected", f"{type(exc).__name__}: {exc}")
    record.end = time.perf_counter()
    return record


def _fail(record: RequestRecord, kind: str, message: str) -> None:
    record.error_kind = kind
    record.error = message[:ERROR_BODY_BYTES]
