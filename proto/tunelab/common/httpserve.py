"""A small HTTP/1.1 server for the metrics endpoints of both daemons, with every resource bounded.

``http.server``'s ThreadingMixIn starts one thread per connection: 3,000 idle keep-alive
connections were 3,012 threads. Here one asyncio event-loop thread owns every connection, and:

- at most ``max_connections`` are open, and at most ``max_per_client`` from one source address.
  A new connection past either cap takes the place of an *idle* one (waiting for its next
  request; of the client holding the most connections, least recently used first), else of a
  slow one (a request head still arriving), so a fresh scrape always gets its answer; only
  when every connection has a handler running is the new one answered ``503`` and closed;
- a connection with no request for ``idle_timeout`` seconds is closed, and so is one whose
  request head is not complete ``request_timeout`` seconds after it began (slow senders);
- a request head over ``MAX_HEAD`` bytes is answered ``431``, and so is a client that pipelines
  more than ``MAX_BUFFER`` bytes ahead of its replies; a request with a body ``400``;
- replies a client does not read pause reading from it (the transport's write buffer limits);
- handlers that may block (``blocking(request)``: ``/metrics/engines`` fetches every engine)
  run on a pool of ``workers`` threads; cached ``/metrics`` replies are written from the loop.

So the endpoint never holds more than ``1 + workers`` threads, whatever its clients do.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import structlog

log = structlog.get_logger(__name__)

MAX_HEAD = 8192
MAX_BUFFER = 64 * 1024  # unanswered request bytes kept per connection
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # names lower-case
    keep_alive: bool


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Limits:
    max_connections: int = 64
    idle_timeout: float = 30.0
    request_timeout: float = 10.0
    workers: int = 4
    max_per_client: int = 16

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.workers < 1 or self.max_per_client < 1:
            raise ValueError("max_connections, max_per_client and workers must be >= 1")
        if self.idle_timeout <= 0 or self.request_timeout <= 0:
            raise ValueError("timeouts must be > 0")


@dataclass
class ServerStats:
    """What the endpoint has done (written on the loop thread only)."""

    open: int = 0
    rejected: int = 0  # answered 503: over a cap with every connection mid-request
    timed_out: int = 0  # closed idle, or with a request head that never completed
    evicted: int = 0  # closed to make room for a new connection (idle ones first)


def encode(response: Response, keep_alive: bool, head_only: bool = False) -> bytes:
    reason = REASONS.get(response.status, "Unknown")
    lines = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


def parse_head(head: bytes) -> Request | None:
    """The request line and headers of one request; None when malformed."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:
        return None
    request_line, *header_lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
    path, _, query = target.partition("?")
    return Request(method, path, query, headers, keep_alive)


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False  # a handler runs on the pool for this connection
        self.paused = False  # the client does not read its replies
        self.counted = False
        self.timer: asyncio.TimerHandle | None = None
        self.head_timer = False
        self.client = ""
        self.last_active = 0.0

    @property
    def idle(self) -> bool:
        """Waiting for its next request: nothing half-received, no handler running."""
        return not self.busy and not self.buffer and not self.head_timer

    # --- asyncio callbacks (loop thread) --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self.last_active = asyncio.get_running_loop().time()
        if not self.server.make_room(self.client):
            self.server.stats.rejected += 1
            reply = Response(503, b"too many connections; retry later\n")
            transport.write(encode(reply, keep_alive=False))
            transport.close()
            return
        self.server.stats.open += 1
        self.counted = True
        self.server.connections.add(self)
        self.server.by_client.setdefault(self.client, set()).add(self)
        transport.set_write_buffer_limits(high=1 << 20)
        self._arm(self.server.limits.idle_timeout, head=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        self.transport = None
        if self.timer is not None:
            self.timer.cancel()

    def _forget(self) -> None:
        if self.counted:
            self.server.stats.open -= 1
            self.counted = False
            self.server.connections.discard(self)
            mine = self.server.by_client.get(self.client)
            if mine is not None:
                mine.discard(self)
                if not mine:
                    del self.server.by_client[self.client]

    def evict(self) -> None:
        """Make room: closed now and no longer counted (its reply, if any, is already sent)."""
        self.server.stats.evicted += 1
        self._forget()
        self.close()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._process()

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            return
        self.buffer += data
        if len(self.buffer) > MAX_BUFFER:  # pipelined far ahead of its replies: bounded
            self._fail(431, b"too much pipelined data\n")
            return
        if not self.head_timer and not self.busy:
            self._arm(self.server.limits.request_timeout, head=True)
        self._process()

    # --- requests ---------------------------------------------------------------------------

    def _process(self) -> None:
        while self.transport is not None and not self.busy and not self.paused:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self._fail(431, b"request head too large\n")
                return
            if end > MAX_HEAD:
                self._fail(431, b"request head too large\n")
                return
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            request = parse_head(head)
            if request is None:
                self._fail(400, b"malformed request\n")
                return
            if request.headers.get("content-length", "0") != "0" or (
                "transfer-encoding" in request.headers
            ):
                self._fail(400, b"no request body expected\n")
                return
            if self.server.blocking(request):
                self.busy = True
                self._disarm()
                future = asyncio.get_running_loop().run_in_executor(
                    self.server.pool, self.server.call, request
                )
                future.add_done_callback(functools.partial(self._finish, request))
                return
            self._reply(request, self.server.call(request))

    def _finish(self, request: Request, done: asyncio.Future[Response]) -> None:
        self.busy = False
        if self.transport is None or self.transport.is_closing() or done.cancelled():
            return
        self._reply(request, done.result())
        self._process()

    def _reply(self, request: Request, response: Response) -> None:
        transport = self.transport
        if transport is None:
            return
        transport.write(encode(response, request.keep_alive, request.method == "HEAD"))
        self.last_active = asyncio.get_running_loop().time()
        if not request.keep_alive:
            self.close()
            return
        self._arm(self.server.limits.idle_timeout, head=False)
        if self.buffer:
            self._arm(self.server.limits.request_timeout, head=True)

    def _fail(self, status: int, body: bytes) -> None:
        if self.transport is not None:
            self.transport.write(encode(Response(status, body), keep_alive=False))
        self.close()

    def close(self) -> None:
        self._disarm()
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    # --- timers -----------------------------------------------------------------------------

    def _arm(self, seconds: float, head: bool) -> None:
        self._disarm()
        self.head_timer = head
        self.timer = asyncio.get_running_loop().call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.head_timer = False

    def _timed_out(self) -> None:
        self.timer = None
        self.server.stats.timed_out += 1
        if self.transport is not None:
            self.transport.abort()
            self.transport = None


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0 picks a port) from its own event-loop thread."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Callable[[Request], Response],
        blocking: Callable[[Request], bool] = lambda request: False,
        limits: Limits | None = None,
    ) -> None:
        self.handler = handler
        self.blocking = blocking
        self.limits = limits or Limits()
        self.stats = ServerStats()
        self.connections: set[_Connection] = set()
        self.by_client: dict[str, set[_Connection]] = {}
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=256)
        self._socket.setblocking(False)
        self.port: int = self._socket.getsockname()[1]
        self.thread_prefix = f"metrics-http-{self.port}"  # every thread of this server
        self.pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix=self.thread_prefix)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"{self.thread_prefix}-loop", daemon=True
        )

    def make_room(self, client: str) -> bool:
        """Room for one more connection from ``client``: True, evicting one if a cap is reached
        (see the module docstring); False when every candidate is mid-request."""
        mine = self.by_client.get(client, set())
        if len(mine) >= self.limits.max_per_client:
            victim = _victim(mine, {client: len(mine)})
            if victim is None:
                return False
            victim.evict()
        if self.stats.open >= self.limits.max_connections:
            counts = {c: len(conns) for c, conns in self.by_client.items()}
            victim = _victim(self.connections, counts)
            if victim is None:
                return False
            victim.evict()
        return True

    def call(self, request: Request) -> Response:
        """The handler, with a bug in it answered 500 and logged (never a dead connection)."""
        try:
            return self.handler(request)
        except Exception:  # logged with its traceback and answered: not hidden
            log.exception("metrics_http_handler_failed", path=request.path)
            return Response(500, b"internal error; see log\n")

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            self._loop.create_server(lambda: _Connection(self), sock=self._socket)
        )
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._shutdown)
            self._thread.join(5)
        else:
            self._socket.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        self._loop.stop()


def _victim(candidates: set[_Connection], counts: Mapping[str, int]) -> _Connection | None:
    """The connection to close for a new one: idle before slow, the busiest client's first,
    least recently active first; never one whose handler is running."""
    idle = [c for c in candidates if c.idle]
    slow = [c for c in candidates if not c.idle and not c.busy]
    for group in (idle, slow):
        if group:
            return min(group, key=lambda c: (-counts.get(c.client, 0), c.last_active))
    return None
