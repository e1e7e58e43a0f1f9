"""A minimal HTTP/1.1 server on ``asyncio.Protocol``: keep-alive, Content-Length bodies, chunked
streaming responses.

Why not aiohttp.web: the simulator must hold 1024 concurrent streams and write ~10^4 timed chunks
per second on a 2-core machine that also runs the client under test, and its fault modes need
direct control of the socket (close mid-body, never answer). One protocol object per connection
and one ``transport.write`` per chunk do both with the least CPU.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""
    received: float = 0.0  # loop time when its last bytes were read: the request's arrival


class Handler(Protocol):
    def __call__(self, request: Request, conn: Connection) -> None: ...


@dataclass
class _State:
    busy: bool = False  # a response is in progress; later requests wait in the buffer
    streaming: bool = False
    keep_alive: bool = True
    on_close: list[Callable[[], None]] = field(default_factory=list)


class Connection(asyncio.Protocol):
    """One client connection. The handler answers each request through the ``send_*`` methods."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._state = _State()
        self.closed = False
        self._received = 0.0

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not isinstance(transport, asyncio.Transport):  # pragma: no cover - TCP only
            raise TypeError("stream transport expected")
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self._received = asyncio.get_running_loop().time()
        self._buffer += data
        if not self._state.busy:
            self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        callbacks, self._state.on_close = self._state.on_close, []
        for callback in callbacks:
            callback()

    # parsing ----------------------------------------------------------------------------------
    def _next_request(self) -> None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEADER_BYTES:
                self._fail(400, "headers too large")
            return
        head = bytes(self._buffer[:end]).decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._fail(400, "malformed request line")
            return
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                self._fail(400, "malformed header")
                return
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._fail(411, "chunked request bodies are not supported; send Content-Length")
            return
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self._fail(400, "bad Content-Length")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self._fail(413, "body too large")
            return
        if len(self._buffer) < end + 4 + length:
            return  # wait for the rest of the body
        body = bytes(self._buffer[end + 4 : end + 4 + length])
        del self._buffer[: end + 4 + length]
        connection = headers.get("connection", "").lower()
        self._state.keep_alive = (
            connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
        )
        self._state.busy = True
        path = target.split("?", 1)[0]
        self._handler(Request(method, path, headers, body, self._received), self)

    def _fail(self, status: int, message: str) -> None:
        self._state.keep_alive = False
        self._state.busy = True
        self.send_response(status, f'{{"error": "{message}"}}'.encode(), "application/json")

    # responding -------------------------------------------------------------------------------
    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client goes away before the response is finished."""
        self._state.on_close.append(callback)

    def _head(self, status: int, content_type: str, extra: dict[str, str]) -> list[str]:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
            f"Content-Type: {content_type}",
            "Connection: " + ("keep-alive" if self._state.keep_alive else "close"),
        ]
        lines.extend(f"{name}: {value}" for name, value in extra.items())
        return lines

    def send_response(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        """A complete response with Content-Length; ends this request."""
        lines = self._head(status, content_type, extra_headers or {})
        lines.append(f"Content-Length: {len(body)}")
        self._write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        self._done()

    def start_stream(
        self, content_type: str = "text/event-stream", extra_headers: dict[str, str] | None = None
    ) -> None:
        lines = self._head(status=200, content_type=content_type, extra=extra_headers or {})
        lines.append("Cache-Control: no-cache")
        lines.append("Transfer-Encoding: chunked")
        self._state.streaming = True
        self._write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def send_chunk(self, data: bytes) -> None:
        """One HTTP chunk of a streaming body (one write, so TCP_NODELAY sends it at once)."""
        self._write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_stream(self, last: bytes = b"") -> None:
        tail = b"%x\r\n%b\r\n0\r\n\r\n" % (len(last), last) if last else b"0\r\n\r\n"
        self._write(tail)
        self._state.streaming = False
        self._done()

    def close(self) -> None:
        """Close the connection now (a body cut short: the client sees an incomplete payload)."""
        self._state.on_close.clear()
        if self._transport is not None:
            self._transport.close()

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self.closed:
            self._transport.write(data)

    def _done(self) -> None:
        self._state.on_close.clear()
        self._state.busy = False
        if not self._state.keep_alive:
            if self._transport is not None:
                self._transport.close()
            return
        if self._buffer:
            asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        if not self._state.busy and not self.closed:
            self._next_request()
