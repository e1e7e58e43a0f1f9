"""One bounded HTTP client for every call tunelab makes out (issue 45.4): the watch webhook,
the chat-template step's ``/tokenize`` and ``/detokenize``, engine ``/metrics``, a server's
``/v1/models``, the controller's metrics scrape.

What the receiver cannot do to the caller:

- hold it past ``seconds`` (a total deadline for connect, send, status line, headers and body:
  every socket operation gets the time left, so a slowloris answer sending a byte every few
  seconds ends at the deadline, not after days);
- grow it past ``max_body`` bytes of body, whatever the status (a 3xx body too) or the declared
  ``Content-Length``: the rest is never read, the connection is closed;
- send it elsewhere: redirects are never followed (a 3xx is an answer like any other, its
  ``Location`` unread), so no redirect reaches an internal URL;
- raise anything but :class:`HttpFailure`: a refused or reset connection, a timeout, TLS
  errors, a garbage status line (``BadStatusLine``), HTTP/2 frames from a gRPC port, too many
  or too long headers. Its message is the failure's kind and a short, printable detail
  (never the receiver's bytes raw, never the URL: a webhook's URL is a secret).

Built on ``http.client`` rather than ``urllib.request`` (which reads a redirect's body whole
and follows redirects as GETs) or ``requests``/``urllib3`` (whose timeouts are per read, as
urllib's are): the deadline lives in the socket wrapper below. The ``http_proxy`` /
``https_proxy`` / ``no_proxy`` variables are honoured as urllib honoured them (a webhook behind
a proxy keeps working). Host name lookup is the resolver's and not under the deadline.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunelab.common.sanitize import printable

MAX_DETAIL = 120  # characters of an error's detail kept in HttpFailure's message


class HttpFailure(Exception):
    """No usable answer: ``kind`` is the failure's type (``TimeoutError``, ``BadStatusLine``)."""

    def __init__(self, kind: str, detail: str = "", protocol: bool = False) -> None:
        self.kind = kind
        self.protocol = protocol  # an answer came, but not HTTP/1.x (BadStatusLine & co)
        self.detail = printable(detail, MAX_DETAIL)
        super().__init__(f"{kind}: {self.detail}" if self.detail else kind)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes  # at most max_body bytes
    truncated: bool  # the body was longer than max_body (the rest was not read)
    headers: Mapping[str, str] = field(default_factory=dict)  # names lowercased

    def whole(self, what: str = "the answer") -> bytes:
        """The body, or HttpFailure when it was cut at the cap."""
        if self.truncated:
            raise HttpFailure("ResponseTooLarge", f"{what} is larger than {len(self.body)} bytes")
        return self.body


class _DeadlineIO(io.RawIOBase):
    """Reads of a socket, each given the time left before the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(_left(self._deadline))
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """A connected socket whose sends and reads all end at one deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str = "rb", *_: Any, **__: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineIO(self._sock, self._deadline))

    def sendall(self, data: Any) -> None:
        self._sock.settimeout(_left(self._deadline))
        self._sock.sendall(data)

    def close(self) -> None:
        """Nothing: http.client closes its socket while the answer's body is still to be read
        (a plain socket defers that for its makefile); :func:`request` closes it when done."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


class _Bounded(http.client.HTTPConnection):
    deadline = 0.0
    raw: socket.socket | None = None

    def connect(self) -> None:
        super().connect()
        self.raw = self.sock
        self.sock = _DeadlineSocket(self.sock, self.deadline)


class _BoundedTLS(_Bounded, http.client.HTTPSConnection):
    pass


def _connection(url: urllib.parse.SplitResult, deadline: float) -> tuple[_Bounded, str]:
    """The connection for ``url`` (through a proxy where the environment names one) and the
    request target to send on it."""
    if url.scheme not in ("http", "https") or not url.hostname:
        raise HttpFailure("InvalidURL", "not an http(s) URL with a host")
    port = url.port or (443 if url.scheme == "https" else 80)
    target = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
    proxy = str(urllib.request.getproxies().get(url.scheme) or "")
    direct = not proxy or urllib.request.proxy_bypass(url.hostname)
    host, proxy_port = (url.hostname, port)
    if not direct:
        parsed = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, proxy_port = parsed.hostname or "", parsed.port or 80
    timeout = _left(deadline)
    conn: _Bounded
    if url.scheme == "https":
        context = ssl.create_default_context()
        conn = _BoundedTLS(host, proxy_port, timeout=timeout, context=context)
        if not direct:
            conn.set_tunnel(url.hostname, port)
    else:
        conn = _Bounded(host, proxy_port, timeout=timeout)
        if not direct:  # a plain-http proxy takes the absolute URL
            netloc = f"{url.hostname}:{port}"
            target = urllib.parse.urlunsplit(("http", netloc, url.path or "/", url.query, ""))
    conn.deadline = deadline
    return conn, target


def request(
    method: str,
    url: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    seconds: float,
    max_body: int,
) -> Reply:
    """One request, bounded as the module says; any status is a Reply (HttpFailure: none)."""
    deadline = time.monotonic() + seconds
    conn: _Bounded | None = None
    try:
        conn, target = _connection(urllib.parse.urlsplit(url), deadline)
        conn.request(method, target, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        data = response.read(max_body + 1)
        found = {k.lower(): printable(v, 1024) for k, v in list(response.getheaders())[:100]}
        return Reply(response.status, data[:max_body], len(data) > max_body, found)
    except HttpFailure:
        raise
    except http.client.HTTPException as exc:  # BadStatusLine, LineTooLong, IncompleteRead, ...
        raise HttpFailure(type(exc).__name__, _detail(exc), protocol=True) from None
    except (OSError, ValueError, UnicodeError) as exc:  # refused, reset, timeout, TLS, bad URL
        raise HttpFailure(type(exc).__name__, _detail(exc)) from None
    finally:
        if conn is not None:
            conn.close()
            if conn.raw is not None:  # the socket itself (_DeadlineSocket.close leaves it)
                conn.raw.close()


def _detail(exc: BaseException) -> str:
    if isinstance(exc, http.client.BadStatusLine):
        return "not an HTTP/1.x answer"  # its bytes (HTTP/2 frames, garbage) are not shown
    text = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
    return printable(str(text), MAX_DETAIL)


def post_json(url: str, doc: Any, *, seconds: float, max_body: int) -> Reply:
    """POST ``doc`` as JSON."""
    payload = json.dumps(doc).encode()
    headers = {"Content-Type": "application/json"}
    return request("POST", url, payload, headers, seconds=seconds, max_body=max_body)


def get(url: str, *, seconds: float, max_body: int, accept: str = "*/*") -> Reply:
    return request("GET", url, None, {"Accept": accept}, seconds=seconds, max_body=max_body)
