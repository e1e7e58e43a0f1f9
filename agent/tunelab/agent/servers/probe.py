"""The readiness probe: an HTTP GET whose 2xx status alone means ready (the body never matters),
optionally followed by a check that ``/v1/models`` lists the model."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass

PROBE_TIMEOUT = 2.0


@dataclass(frozen=True)
class ProbeResult:
    ready: bool
    detail: str  # what the last attempt saw, for a person
    # the server is up and lists models, but not the one asked for: a wrong model name, which
    # waiting out the startup budget (20 min by default) will not fix
    wrong_model: bool = False


def _get(port: int, path: str, timeout: float) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close", "Accept": "*/*"})
        response = conn.getresponse()
        return response.status, response.read(1 << 20)
    finally:
        conn.close()


def probe_ready(
    port: int, path: str, model: str = "", timeout: float = PROBE_TIMEOUT
) -> ProbeResult:
    try:
        status, _ = _get(port, path, timeout)
    except (OSError, http.client.HTTPException) as exc:
        return ProbeResult(False, f"GET {path}: {exc.__class__.__name__}: {exc}")
    if not 200 <= status < 300:
        return ProbeResult(False, f"GET {path}: HTTP {status}")
    if not model:
        return ProbeResult(True, f"GET {path}: HTTP {status}")
    try:
        status, body = _get(port, "/v1/models", timeout)
    except (OSError, http.client.HTTPException) as exc:
        return ProbeResult(False, f"GET /v1/models: {exc.__class__.__name__}: {exc}")
    if not 200 <= status < 300:
        return ProbeResult(False, f"GET /v1/models: HTTP {status}")
    try:
        ids = [str(m.get("id")) for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError, TypeError):
        return ProbeResult(False, "GET /v1/models: body is not an OpenAI model list")
    if model in ids:
        return ProbeResult(True, f"GET {path}: HTTP 2xx; model {model} listed")
    return ProbeResult(False, f"GET /v1/models: {model!r} not in {ids[:5]}", wrong_model=bool(ids))
