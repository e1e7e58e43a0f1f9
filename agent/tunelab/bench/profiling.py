"""The engine's profiler around one point's measured window, and cache resets between points.

Both are plain HTTP POSTs to the server under test (vLLM ``/start_profile`` + ``/stop_profile``
and ``/reset_prefix_cache``; SGLang the same profile paths and ``/flush_cache``); which URLs and
bodies is the engine profile's business (``tunelab.agent.engines.profiling``) or the user's
(``tunelab bench --profile-start-url``). Neither ever fails a benchmark: a failure becomes a
warning on the point, with its reason, and the point is marked (``profile.ok``/``cache_reset.ok``
false).

The stop is always sent once a start was sent, even when the start timed out or failed (the
server may have started profiling anyway), so a server is never left profiling by us; a stop
that fails is retried once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from tunelab.common.sanitize import printable

START_TIMEOUT_S = 30.0
RESET_TIMEOUT_S = 30.0
STOP_RETRIES = 1


@dataclass
class HttpOutcome:
    ok: bool
    status: int | None
    error: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "status": self.status,
            "error": self.error or None,
            "seconds": round(self.seconds, 3),
        }


MAX_ANSWER = 4096


async def post(url: str, body: bytes | None, timeout_s: float) -> HttpOutcome:
    """POST ``body`` (JSON) to ``url``; any failure is an outcome, never an exception. Bounded
    as tunelab.common.boundedhttp's calls are (this one is asynchronous, in aiohttp): one total
    timeout, at most ``MAX_ANSWER`` bytes of any answer, redirects not followed."""
    started = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    headers = {"Content-Type": "application/json"} if body else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, data=body or b"", headers=headers, allow_redirects=False) as response,
        ):  # the total timeout bounds the whole call; at most MAX_ANSWER bytes are read
            raw = await response.content.read(MAX_ANSWER)
            text = printable(raw.decode(errors="replace"), 300)
            ok = 200 <= response.status < 300
            error = "" if ok else f"HTTP {response.status} from {url}: {text.strip()}"
            return HttpOutcome(ok, response.status, error, time.perf_counter() - started)
    except TimeoutError:
        error = f"no answer from {url} within {timeout_s:g} s"
    except aiohttp.ClientError as exc:
        error = f"{url}: {type(exc).__name__}: {exc}"
    return HttpOutcome(False, None, error, time.perf_counter() - started)


@dataclass
class ProfileWindow:
    """What happened to the profile of one point: the window and its outcome."""

    start: HttpOutcome | None = None
    stop: HttpOutcome | None = None
    window_seconds: float = 0.0
    output_tokens: int = 0
    requests: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.start and self.start.ok and self.stop and self.stop.ok)

    def warning(self) -> str | None:
        if self.ok:
            return None
        if self.start is None:
            return "profile: not started (the point ended first)"
        if not self.start.ok:
            return f"profile: start failed: {self.start.error}"
        if self.stop is None:
            return "profile: not stopped"
        return f"profile: stop failed: {self.stop.error}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "start": None if self.start is None else self.start.to_dict(),
            "stop": None if self.stop is None else self.stop.to_dict(),
            "window_seconds": round(self.window_seconds, 3),
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "warning": self.warning(),
        }


async def stop_profile(url: str, body: bytes | None, timeout_s: float) -> HttpOutcome:
    """Send the stop, once more if it fails (a trace flush can outlast the first try)."""
    outcome = await post(url, body, timeout_s)
    for _ in range(STOP_RETRIES):
        if outcome.ok:
            break
        retry = await post(url, body, timeout_s)
        retry.error = f"{outcome.error}; retried: {retry.error}" if not retry.ok else ""
        outcome = retry
    return outcome


async def wait_window(seconds: float, requests: int, done: Any, finished: asyncio.Event) -> None:
    """Until ``seconds`` pass, ``requests`` are done (``done()`` counts them) or the point ends."""
    deadline = time.perf_counter() + seconds if seconds else None
    while not finished.is_set():
        if deadline is not None and time.perf_counter() >= deadline:
            return
        if requests and done() >= requests:
            return
        remaining = 0.05 if deadline is None else max(min(deadline - time.perf_counter(), 0.05), 0)
        try:
            await asyncio.wait_for(finished.wait(), timeout=remaining)
        except TimeoutError:
            continue
