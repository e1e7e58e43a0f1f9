"""The readiness probe: an HTTP GET whose 2xx status alone means ready (the body never matters),
optionally followed by a check that ``/v1/models`` lists the model.

Etiquette (:class:`ReadinessProbe`): every HTTP request lands in the engine's access log, so
before the engine is ready the probe sends as few as it can. Until the port accepts it only
TCP-connects (nothing is logged); when the port first accepts it GETs at once (vLLM opens its port
only when fully up, so this is READY within one fast interval); while the port is open but not
ready (SGLang warming up) GETs back off to one every few seconds, and the engine's own ready
line (``nudge``) brings them back to fast for a short burst.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

PROBE_TIMEOUT = 2.0
CONNECT_TIMEOUT = 0.2
FAST_INTERVAL = 0.05  # TCP connects until the port accepts; GETs during a burst
SLOW_FIRST = 0.5  # the port accepts but the answer is not 2xx: back off from this...
SLOW_MAX = 2.0  # ...doubling up to this
BURST_SECONDS = 2.0  # after a ready line, GET every FAST_INTERVAL this long


@dataclass(frozen=True)
class ProbeResult:
    ready: bool
    detail: str  # what the last attempt saw, for a person
    requests: int = 0  # HTTP requests this attempt sent
    # the server is up and lists models, but not the one asked for: a wrong model name, which
    # waiting out the startup budget (20 min by default) will not fix
    wrong_model: bool = False
    hint: str = ""  # wrong_model: how the server would serve the name (served_name_hint)


def _get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close", "Accept": "*/*"})
        response = conn.getresponse()
        return response.status, response.read(1 << 20)
    finally:
        conn.close()


def port_accepts(port: int, timeout: float = CONNECT_TIMEOUT) -> bool:
    """A bare TCP connect and close: sends no byte, so no engine logs it."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def probe_ready(
    port: int, path: str, model: str = "", timeout: float = PROBE_TIMEOUT
) -> ProbeResult:
    try:
        status, _ = _get(port, path, timeout)
    except (OSError, http.client.HTTPException) as exc:
        sent = 0 if isinstance(exc, ConnectionRefusedError) else 1  # refused: nothing reached it
        return ProbeResult(False, f"GET {path}: {exc.__class__.__name__}: {exc}", sent)
    if not 200 <= status < 300:
        return ProbeResult(False, f"GET {path}: HTTP {status}", 1)
    if not model:
        return ProbeResult(True, f"GET {path}: HTTP {status}", 1)
    try:
        status, body = _get(port, "/v1/models", timeout)
    except (OSError, http.client.HTTPException) as exc:
        return ProbeResult(False, f"GET /v1/models: {exc.__class__.__name__}: {exc}", 2)
    if not 200 <= status < 300:
        return ProbeResult(False, f"GET /v1/models: HTTP {status}", 2)
    try:
        ids = [str(m.get("id")) for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        return ProbeResult(False, "GET /v1/models: body is not an OpenAI model list", 2)
    if model in ids:
        return ProbeResult(True, f"GET {path}: HTTP 2xx; model {model} listed", 2)
    return ProbeResult(
        False,
        f"GET /v1/models: {model!r} not in {ids[:5]}",
        2,
        wrong_model=bool(ids),
        hint=served_name_hint(model, ids),
    )


def served_name_hint(model: str, ids: list[str]) -> str:
    """vLLM and SGLang list a model by its path (``--model-path /models/GLM-5``) unless
    ``--served-model-name`` names it: where a listed path ends with the ready model, say so."""
    for listed in ids:
        if "/" in listed and PurePosixPath(listed).name.lower() == model.lower():
            return (
                f"it serves {listed!r} under its path: add --served-model-name {model} to the "
                f"server's flags (vLLM, SGLang), or make the ready model {listed!r}"
            )
    return ""


class ReadinessProbe:
    """Decides when to connect and when to GET; :meth:`poll` is called often and does at most
    one attempt when one is due. Counts the HTTP requests it sent (``http_requests``)."""

    def __init__(
        self,
        port: int,
        path: str,
        model: str = "",
        *,
        fast: float = FAST_INTERVAL,
        slow_first: float = SLOW_FIRST,
        slow_max: float = SLOW_MAX,
        burst: float = BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        accepts: Callable[[int], bool] = port_accepts,
        get: Callable[[int, str, str], ProbeResult] = probe_ready,
    ) -> None:
        self.port, self.path, self.model = port, path, model
        self._fast, self._slow_first, self._slow_max, self._burst = (
            fast,
            slow_first,
            slow_max,
            burst,
        )
        self._clock = clock
        self._accepts, self._get = accepts, get
        self._next = 0.0
        self._slow = 0.0
        self._burst_until = 0.0
        self._port_open = False
        self.http_requests = 0
        self.tcp_connects = 0
        self.last = ProbeResult(False, "not probed yet")

    def nudge(self) -> None:
        """The engine printed its ready line: GET now and fast for a while."""
        now = self._clock()
        self._next = now
        self._burst_until = now + self._burst
        self._port_open = True  # a GET that is refused puts it back to TCP connects

    def poll(self) -> ProbeResult | None:
        """One attempt if one is due (None otherwise); the result of a GET, or of a refused
        connect."""
        now = self._clock()
        if now < self._next:
            return None
        if not self._port_open:
            self.tcp_connects += 1
            if not self._accepts(self.port):
                self._next = now + self._fast
                self.last = ProbeResult(False, f"port {self.port} does not accept connections yet")
                return self.last
            self._port_open = True
        result = self._get(self.port, self.path, self.model)
        self.http_requests += result.requests
        self.last = result
        if result.ready:
            return result
        if "ConnectionRefused" in result.detail:
            self._port_open = False
            self._next = now + self._fast
        elif now < self._burst_until:
            self._next = now + self._fast
        else:
            self._slow = min(self._slow_max, self._slow * 2 if self._slow else self._slow_first)
            self._next = now + self._slow
        return result
