"""aiohttp, set up for measuring: a pool as large as the concurrency, a large read buffer, and
the time each read's bytes arrived.

A streamed chunk is timed when the event loop read it from the socket, not when the request's
task got round to it: under load, a loop that reads 1024 sockets in one iteration runs the 1024
woken tasks only after, so task-side timestamps spread by the whole batch's processing time.
:class:`TimedResponseHandler` (aiohttp's protocol, extended) notes ``(body bytes so far, time)``
at every read; :func:`timed_pieces` splits what the reader returns at those marks.

This uses two aiohttp internals (the connector's protocol factory and the protocol's current
payload); when they are missing, :func:`open_session` falls back to task-side timestamps and
:func:`read_marks` returns None.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
import types
from collections.abc import Iterator

import aiohttp
from aiohttp.client_proto import ResponseHandler

READ_BUFSIZE = 4 * 1024 * 1024  # the 64 KiB default collapses long outputs (vllm#39963)
Marks = collections.deque[tuple[int, float]]


class TimedResponseHandler(ResponseHandler):
    """Records, per read, how many bytes the current response body had then, and when."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.mark_payload: object = None
        self.marks: Marks = collections.deque()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        before = self._payload
        super().data_received(data)
        payload = self._payload or before
        if payload is None:
            return
        if payload is not self.mark_payload:
            self.mark_payload = payload
            self.marks.clear()
        self.marks.append((payload.total_bytes, now))


class PoolStats:
    """Connections the pool opened (each new connection makes one protocol)."""

    def __init__(self) -> None:
        self.opened = 0


def _timed_handler(loop: asyncio.AbstractEventLoop, stats: PoolStats) -> ResponseHandler:
    stats.opened += 1
    return TimedResponseHandler(loop)


async def _body_sent(
    session: aiohttp.ClientSession,
    ctx: types.SimpleNamespace,
    params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    """aiohttp calls this just before it writes the request body to the socket."""
    on_sent = ctx.trace_request_ctx
    if callable(on_sent):
        on_sent(time.perf_counter())


def open_session(concurrency: int, stats: PoolStats | None = None) -> aiohttp.ClientSession:
    """A session whose pool holds ``concurrency`` connections (0 = unlimited: open loops);
    aiohttp's default cap of 100 would silently throttle a higher concurrency. Pass a callable
    as ``trace_request_ctx`` to learn when a request's body went out; ``stats`` counts the
    connections opened."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, keepalive_timeout=60)
    if hasattr(connector, "_factory"):
        loop = asyncio.get_running_loop()
        connector._factory = functools.partial(_timed_handler, loop, stats or PoolStats())
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_body_sent)
    return aiohttp.ClientSession(
        connector=connector,
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,
        trace_configs=[trace],
    )


def read_marks(resp: aiohttp.ClientResponse) -> Marks | None:
    """The read marks of ``resp``'s body, or None when the connection is not timed."""
    proto = resp.connection.protocol if resp.connection is not None else None
    if isinstance(proto, TimedResponseHandler) and proto.mark_payload is resp.content:
        return proto.marks
    return None


def timed_pieces(
    data: bytes, consumed: int, marks: Marks | None, now: float
) -> Iterator[tuple[bytes, float]]:
    """Split ``data`` (body bytes ``consumed .. consumed+len``) into the pieces each read
    delivered, each with its read time; without marks, all of it at ``now``."""
    if not marks:
        yield data, now
        return
    end = consumed + len(data)
    pos = consumed
    while marks and marks[0][0] <= end:
        upto, at = marks.popleft()
        if upto > pos:
            yield data[pos - consumed : upto - consumed], at
            pos = upto
    if pos < end:  # the rest came with a read not fully returned yet
        yield data[pos - consumed :], marks[0][1] if marks else now


async def warm_connections(
    session: aiohttp.ClientSession, url: str, count: int, timeout: float
) -> int:
    """Open ``count`` keep-alive connections before a point's clock starts: ``count`` GETs of
    ``url`` at once, each holding its connection until all have their answer (so none is
    reused by another), then returned to the pool. Returns how many were opened and answered;
    any answer will do (the status does not matter, the connection does)."""
    if count <= 0:
        return 0
    answered = settled = 0
    everyone = asyncio.Event()
    limit = aiohttp.ClientTimeout(total=timeout)

    def settle() -> None:
        nonlocal settled
        settled += 1
        if settled >= count:
            everyone.set()

    async def one() -> None:
        nonlocal answered
        try:
            async with session.get(url, timeout=limit) as resp:
                answered += 1
                settle()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(everyone.wait(), timeout)
                await resp.read()
        except (aiohttp.ClientError, TimeoutError):
            settle()

    await asyncio.gather(*(one() for _ in range(count)))
    return answered
