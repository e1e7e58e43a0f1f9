"""Every MLflow call bounded in response size and time (issue 36.3).

MLflow's client reads whole HTTP bodies through ``requests``: a tracking server answering
``Content-Length: 4000000000`` and an endless body grew the controller by gigabytes. MLflow has
no setting for it, so the bound sits in ``requests``' transport: :func:`install` wraps
``HTTPAdapter.build_response`` once per process, and the wrap acts only inside
:func:`bounded` (a context variable, set around each of the sink's calls; every other use of
``requests`` in the process is untouched). Inside it a response

- declaring a ``Content-Length`` above the cap is closed before its body is read;
- is read through :class:`BoundedBody`, which stops a body (after decoding: a gzip bomb too)
  at the cap, and the whole call at its deadline.
- that redirects is not followed (issue 45.4): it loses its ``Location``, so ``requests`` hands
  the 3xx to MLflow, which reports a failed request.

Either raises :class:`ResponseTooLarge` / :class:`ResponseTooSlow`, which MLflow's client reports
as a failed request: an export failure the exporter retries with back-off. Limits: a server that
sends headers slowly is bounded by the client's socket timeout per read
(``MLFLOW_HTTP_REQUEST_TIMEOUT``), not by the call's deadline.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

MAX_RESPONSE_BYTES = 32 << 20  # a page of 1,000 runs with their params and tags is ~10 MiB
CALL_SECONDS = 60.0


class ResponseTooLarge(requests.exceptions.RequestException):
    """The answer is larger than the cap (declared or as read)."""


class ResponseTooSlow(requests.exceptions.RequestException):
    """The answer's body was still coming at the call's deadline."""


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    deadline: float  # time.monotonic()


_LIMITS: contextvars.ContextVar[Limits | None] = contextvars.ContextVar(
    "mlflow_limits", default=None
)
_INSTALL = threading.Lock()
_original: Any = None


class BoundedBody:
    """A urllib3 response whose ``stream`` stops at the byte cap, and whose connection is shut
    at the deadline by a timer (a blocking read of a dripping body wakes up then)."""

    def __init__(self, raw: Any, limits: Limits) -> None:
        self._raw = raw
        self._limits = limits
        self._expired = threading.Event()
        self.read_bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _expire(self) -> None:
        self._expired.set()
        shutdown = getattr(self._raw, "shutdown", None)  # urllib3 >= 2.3: wakes a blocked read
        (shutdown or self._raw.close)()

    def _too_slow(self) -> ResponseTooSlow:
        return ResponseTooSlow("answer still coming at the call's deadline")

    def stream(self, amt: int = 2**16, decode_content: bool | None = None) -> Iterator[bytes]:
        timer = threading.Timer(max(0.0, self._limits.deadline - time.monotonic()), self._expire)
        timer.daemon = True
        timer.start()
        try:
            for chunk in self._raw.stream(amt, decode_content=decode_content):
                self.read_bytes += len(chunk)
                if self.read_bytes > self._limits.max_bytes:
                    self._raw.close()
                    raise ResponseTooLarge(f"answer larger than {self._limits.max_bytes} bytes")
                if self._expired.is_set():
                    raise self._too_slow()
                yield chunk
        except (OSError, ValueError, urllib3.exceptions.HTTPError):
            if self._expired.is_set():  # what the shut connection raised
                raise self._too_slow() from None
            raise
        finally:
            timer.cancel()
        if self._expired.is_set():  # the shut connection read as the body's end
            raise self._too_slow()


def _build_response(self: HTTPAdapter, req: Any, resp: Any) -> requests.Response:
    response: requests.Response = _original(self, req, resp)
    limits = _LIMITS.get()
    if limits is None:
        return response
    declared = response.headers.get("Content-Length", "")
    if declared.strip().isdigit() and int(declared) > limits.max_bytes:
        response.raw.close()  # the connection goes; nothing of the body is read
        raise ResponseTooLarge(
            f"answer declares {int(declared)} bytes, more than {limits.max_bytes}"
        )
    response.raw = BoundedBody(response.raw, limits)
    if response.is_redirect:  # not followed (to an internal URL, as a GET): MLflow sees a 3xx
        del response.headers["Location"]
    return response


def install() -> None:
    """Wrap ``requests``' response building once per process (idempotent)."""
    global _original
    with _INSTALL:
        if _original is None:
            _original = HTTPAdapter.build_response
            HTTPAdapter.build_response = _build_response  # type: ignore[method-assign]


@contextlib.contextmanager
def bounded(max_bytes: int = MAX_RESPONSE_BYTES, seconds: float = CALL_SECONDS) -> Iterator[None]:
    """Every HTTP answer read in this block (this thread/context) is held to the limits."""
    install()
    token = _LIMITS.set(Limits(max_bytes, time.monotonic() + seconds))
    try:
        yield
    finally:
        _LIMITS.reset(token)
