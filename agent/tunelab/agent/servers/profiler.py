"""Profiling a server of ``tunelab server start --profile`` while its own load runs.

``ProfileServer`` on a READY server started with ``spec.profile`` (the registry added the engine
profile's flags at launch, ``engines.profiling.profiler_setup``, with the trace folder
``servers/<id>/traces``): the engine's start URL, a window, the stop URL, then the traces kept
as a run keeps them (``engines.traces.keep_traces``: gzipped, capped, regular files only). The
calls are the run path's (``bench.profiling``): a stop is sent whenever a start was, retried
once, and any failure is a warning with its reason, never an error status, so a server is never
left profiling by us.

- One profile at a time per server; a second is refused (Conflict) while the first is open.
- The window runs on a thread of its own, not the caller's: a caller that goes away ends the
  window early (the stop is still sent and the traces kept), and so does the agent's shutdown,
  or the server leaving READY.
- ``window_requests`` counts the requests the engine completed, from its own ``/metrics``
  counter (vLLM ``vllm:request_success_total``, SGLang ``sglang:num_requests_total``), bounded
  by ``window_seconds`` (at most ``MAX_WINDOW_S``).
- Intent before effect: the window's stop URL is written to ``servers/<id>/profile-open.json``
  before the start is sent and removed once the profile is listed; an agent that restarts finds
  it (``recover``), sends that stop, keeps the traces and lists them with a warning.
- Every profile's listing is appended to ``servers/<id>/profiles.json`` (atomically) before it
  is answered: those names, and only those, ``FetchProfile(server_id=...)`` opens, relative to
  the trace folder. The traces stay after the server stops and go with its folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from prometheus_client.parser import text_string_to_metric_families

from tunelab.agent.engines.profiles import profile_for
from tunelab.agent.engines.profiling import ProfilerCalls, profiler_calls
from tunelab.agent.engines.traces import keep_traces, listed_in
from tunelab.agent.errors import Conflict, InvalidSpec, storage_error
from tunelab.agent.servers.registry import ServerRegistry
from tunelab.agent.servers.states import ServerState
from tunelab.agent.statefile import read_json, write_json_atomic
from tunelab.bench.profiling import (
    START_TIMEOUT_S,
    HttpOutcome,
    ProfileWindow,
    post,
    stop_profile,
)
from tunelab.common.boundedhttp import HttpFailure, get

log = structlog.get_logger(__name__)

PROFILES_FILE = "profiles.json"
OPEN_FILE = "profile-open.json"  # the open window's stop, written before its start is sent
MAX_WINDOW_S = 600.0
DEFAULT_MAX_BYTES = 500 * 1000 * 1000
MAX_BYTES = 1 << 40
DEFAULT_STOP_TIMEOUT_S = 120.0
MAX_STOP_TIMEOUT_S = 600.0
MAX_REQUESTS = 100_000_000
POLL_S = 0.25
METRICS_TIMEOUT_S = 5.0
MAX_COMPLETED = 1e15  # completed requests: a count past it is a broken page
ACTIVITIES = ("cpu", "gpu")
COMPLETED_COUNTER = {"vllm": "vllm:request_success_total", "sglang": "sglang:num_requests_total"}


@dataclass(frozen=True)
class ProfileRequest:
    """One ``ProfileServer`` call's settings, defaults applied."""

    window_seconds: float = 0.0
    window_requests: int = 0
    activities: tuple[str, ...] = ()
    max_bytes: int = 0
    start_url: str = ""
    stop_url: str = ""
    stop_timeout_seconds: float = 0.0

    def validated(self) -> ProfileRequest:
        """Self with defaults filled, or InvalidSpec naming the first bad field."""
        seconds = self.window_seconds
        if not math.isfinite(seconds) or not 0 <= seconds <= MAX_WINDOW_S:
            raise InvalidSpec("window_seconds", f"must be between 0 and {MAX_WINDOW_S:g} s")
        if not 0 <= self.window_requests <= MAX_REQUESTS:
            raise InvalidSpec("window_requests", f"must be between 0 and {MAX_REQUESTS}")
        if seconds == 0 and self.window_requests == 0:
            raise InvalidSpec(
                "window_seconds",
                f"give a window: window_seconds (at most {MAX_WINDOW_S:g}) or window_requests",
            )
        for i, activity in enumerate(self.activities):
            if activity not in ACTIVITIES:
                raise InvalidSpec(f"activities[{i}]", "must be cpu or gpu")
        if not 0 <= self.max_bytes <= MAX_BYTES:
            raise InvalidSpec("max_bytes", f"must be between 0 (500 MB) and {MAX_BYTES}")
        stop = self.stop_timeout_seconds
        if not math.isfinite(stop) or not 0 <= stop <= MAX_STOP_TIMEOUT_S:
            raise InvalidSpec(
                "stop_timeout_seconds", f"must be between 0 (120 s) and {MAX_STOP_TIMEOUT_S:g} s"
            )
        for name in ("start_url", "stop_url"):
            value = str(getattr(self, name))
            if value and not value.startswith(("/", "http://", "https://")):
                raise InvalidSpec(name, "expected a path on the server (/start) or an http URL")
            if len(value) > 2048:
                raise InvalidSpec(name, "longer than 2048 characters")
        return ProfileRequest(
            window_seconds=seconds or MAX_WINDOW_S,
            window_requests=self.window_requests,
            activities=tuple(dict.fromkeys(self.activities)) or ACTIVITIES,
            max_bytes=self.max_bytes or DEFAULT_MAX_BYTES,
            start_url=self.start_url,
            stop_url=self.stop_url,
            stop_timeout_seconds=stop or DEFAULT_STOP_TIMEOUT_S,
        )


@dataclass
class ProfileOutcome:
    """What one profile did; ``done`` once it is over and its listing is on disk."""

    server_id: str
    profile_id: str
    started_at: float = 0.0
    window: ProfileWindow = field(default_factory=ProfileWindow)
    requests: int = -1
    kept: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def ok(self) -> bool:
        return self.window.ok and bool(self.kept.get("traces"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile_id": self.profile_id,
            "ok": self.ok,
            "started_at": self.started_at,
            "window_seconds": round(self.window.window_seconds, 3),
            "requests": self.requests,
            "start": None if self.window.start is None else self.window.start.to_dict(),
            "stop": None if self.window.stop is None else self.window.stop.to_dict(),
            "traces": list(self.kept.get("traces", [])),
            "other_files": list(self.kept.get("other_files", [])),
            "total_bytes": int(self.kept.get("total_bytes", 0)),
            "warnings": list(self.warnings),
        }


class _Session:
    def __init__(self, outcome: ProfileOutcome) -> None:
        self.outcome = outcome
        self.end = threading.Event()  # end the window now (caller gone, agent closing)
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()


class ServerProfiler:
    """The profiles of this agent's servers: one open at a time per server."""

    def __init__(self, registry: ServerRegistry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._open: dict[str, _Session] = {}
        self._closing = threading.Event()

    def is_profiling(self, server_id: str) -> bool:
        with self._lock:
            return server_id in self._open

    def profile(
        self, id_or_name: str, request: ProfileRequest, cancelled: Callable[[], bool]
    ) -> Iterator[ProfileOutcome]:
        """Yield the outcome once the start was answered, and again when it is over."""
        request = request.validated()
        server = self._registry.get(id_or_name)
        if not server.spec.profile:
            raise Conflict(
                f"server {server.id} was started without --profile, so its profiler is off "
                "(it needs flags at start): restart it with `tunelab server start --profile ...`"
            )
        if server.state is not ServerState.READY:
            raise Conflict(f"server {server.id} is {server.state.value}, not READY")
        engine = profile_for(server.spec.engine, server.spec.argv)
        counter = COMPLETED_COUNTER.get(engine.name)
        if request.window_requests and counter is None:
            raise InvalidSpec(
                "window_requests",
                f"counted from the engine's /metrics (vllm, sglang); a {engine.name} server "
                "takes window_seconds",
            )
        calls = profiler_calls(
            engine,
            self._registry.trace_dir(server.id),
            list(request.activities),
            request.start_url,
            request.stop_url,
        )
        if not calls.start_url or not calls.stop_url:
            missing = "start_url" if not calls.start_url else "stop_url"
            raise InvalidSpec(
                missing, f"a {engine.name} server names its profiler's start_url and stop_url"
            )
        with self._lock:
            if self._closing.is_set():
                raise Conflict("the agent is shutting down")
            busy = self._open.get(server.id)
            if busy is not None:
                since = time.strftime("%H:%M:%S", time.localtime(busy.outcome.started_at))
                raise Conflict(
                    f"server {server.id} is being profiled already ({busy.outcome.profile_id}, "
                    f"since {since}): one profile at a time per server; wait for it to end"
                )
            session = _Session(ProfileOutcome(server.id, self._next_id(server.id)))
            session.outcome.started_at = time.time()
            self._open[server.id] = session
        base = f"http://127.0.0.1:{server.spec.port}"
        before = frozenset(_names(self._registry.trace_dir(server.id)))
        intent = {
            "profile_id": session.outcome.profile_id,
            "stop_url": _url(base, calls.stop_url),
            "stop_timeout_seconds": request.stop_timeout_seconds,
            "max_bytes": request.max_bytes,
            "before": sorted(before),
            "started_at": time.time(),
        }
        try:  # intent before effect: an agent that dies in the window stops it at its restart
            write_json_atomic(self._registry.server_dir(server.id) / OPEN_FILE, intent)
        except OSError as exc:
            with self._lock:
                self._open.pop(server.id, None)
            raise storage_error(exc, self._registry.server_dir(server.id), "not profiled") from exc
        session.thread = threading.Thread(
            target=self._run,
            args=(session, request, calls, base, counter, before),
            name=f"profile-{server.id}",
            daemon=True,
        )
        session.thread.start()
        yield from self._follow(session, cancelled)

    def _follow(self, session: _Session, cancelled: Callable[[], bool]) -> Iterator[ProfileOutcome]:
        outcome = session.outcome
        announced = False
        while True:
            with session.changed:
                if not outcome.done and (announced or outcome.window.start is None):
                    session.changed.wait(POLL_S)
                done, started = outcome.done, outcome.window.start is not None
            if cancelled():
                session.end.set()  # the caller went away: end the window; the stop still goes
                return
            if done:
                yield outcome
                return
            if started and not announced:
                announced = True
                yield outcome

    def _next_id(self, server_id: str) -> str:
        return f"p{len(self._listings(server_id)) + 1}"

    def _run(
        self,
        session: _Session,
        request: ProfileRequest,
        calls: ProfilerCalls,
        base: str,
        counter: str | None,
        before: frozenset[str],
    ) -> None:
        outcome = session.outcome
        server_id = outcome.server_id
        try:
            start_url, stop_url = _url(base, calls.start_url), _url(base, calls.stop_url)
            metrics_url = base + "/metrics"
            first = _completed(metrics_url, counter) if counter else None
            why = ""
            began = time.monotonic()
            try:
                body = calls.start_body.encode() or None
                outcome.window.start = asyncio.run(post(start_url, body, START_TIMEOUT_S))
                began = time.monotonic()
                outcome.started_at = time.time()
                session.notify()
                if outcome.window.start.ok:
                    why = self._wait_window(session, request, metrics_url, counter, first)
                    last = _completed(metrics_url, counter) if counter else None
                    if first is not None and last is not None:  # in the window, not the stop
                        outcome.requests = int(last - first)
            finally:  # a stop whenever a start was sent, whatever happened in between
                outcome.window.window_seconds = time.monotonic() - began
                outcome.window.stop = asyncio.run(
                    stop_profile(stop_url, None, request.stop_timeout_seconds)
                )
            warnings = [*calls.warnings]
            if why:
                warnings.append(f"profile: {why}")
            if outcome.window.warning():
                warnings.append(str(outcome.window.warning()))
            server_dir = self._registry.server_dir(server_id)
            outcome.kept = keep_traces(server_dir, request.max_bytes, before)
            warnings += outcome.kept.get("warnings", [])
            outcome.warnings = warnings
            self._append_listing(server_id, outcome)
            (self._registry.server_dir(server_id) / OPEN_FILE).unlink(missing_ok=True)
        except OSError as exc:  # the listing could not be written: say so, never hide it
            outcome.warnings.append(f"profile: could not record the profile: {exc}")
        except Exception as exc:  # a thread's last word: logged, and reported to the caller
            log.exception("server_profile_failed", server_id=server_id)
            outcome.warnings.append(f"profile: failed: {type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._open.pop(server_id, None)
            with session.changed:
                outcome.done = True
                session.changed.notify_all()
            log.info("server_profiled", server_id=server_id, **outcome.to_dict())

    def _wait_window(
        self,
        session: _Session,
        request: ProfileRequest,
        metrics_url: str,
        counter: str | None,
        first: float | None,
    ) -> str:
        """Wait for the window; returns why it ended early ("" when it ran its course)."""
        deadline = time.monotonic() + request.window_seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if request.window_requests:
                    return (
                        f"the window of {request.window_seconds:g} s ended before "
                        f"{request.window_requests} requests completed"
                    )
                return ""
            if session.end.wait(min(POLL_S, remaining)):
                return "the window was ended early (the caller went away or the agent stopped)"
            if self._closing.is_set():
                return "the window was ended early (the agent is shutting down)"
            state = self._registry.state_of(session.outcome.server_id)
            if state is not ServerState.READY:
                return f"the server left READY ({state.value}) during the window"
            if request.window_requests and counter and first is not None:
                now = _completed(metrics_url, counter)
                if now is not None and now - first >= request.window_requests:
                    return ""

    # --- an agent restarted during a window ---------------------------------------------------

    def recover(self) -> list[str]:
        """Finish every window an earlier agent left open (its ``profile-open.json``): send the
        stop it would have sent, keep the traces, list them with a warning. On threads of their
        own (a stop may take minutes); returns the server ids."""
        found: list[str] = []
        for server in self._registry.servers(include_finished=True):
            path = self._registry.server_dir(server.id) / OPEN_FILE
            try:
                intent = read_json(path)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("profile_intent_unreadable", path=str(path), error=str(exc))
                continue
            if not isinstance(intent, dict):
                continue
            session = _Session(ProfileOutcome(server.id, str(intent.get("profile_id", "p?"))))
            with self._lock:
                self._open[server.id] = session
            session.thread = threading.Thread(
                target=self._finish_left_open,
                args=(session, intent, server.state.is_live()),
                name=f"profile-recover-{server.id}",
                daemon=True,
            )
            session.thread.start()
            found.append(server.id)
        return found

    def _finish_left_open(self, session: _Session, intent: dict[str, Any], live: bool) -> None:
        outcome = session.outcome
        server_id = outcome.server_id
        try:
            outcome.started_at = float(intent.get("started_at") or 0.0)
            warnings = ["profile: the agent restarted during the window; ended at its restart"]
            stop_url = str(intent.get("stop_url", ""))
            if live and stop_url.startswith(("http://", "https://")):
                timeout = float(intent.get("stop_timeout_seconds") or DEFAULT_STOP_TIMEOUT_S)
                outcome.window.start = HttpOutcome(True, None, "", 0.0)  # sent by the last agent
                outcome.window.stop = asyncio.run(stop_profile(stop_url, None, timeout))
                if not outcome.window.stop.ok:
                    warnings.append(str(outcome.window.warning()))
            before = frozenset(str(n) for n in intent.get("before", []))
            max_bytes = int(intent.get("max_bytes") or DEFAULT_MAX_BYTES)
            server_dir = self._registry.server_dir(server_id)
            outcome.kept = keep_traces(server_dir, max_bytes, before)
            outcome.warnings = [*warnings, *outcome.kept.get("warnings", [])]
            self._append_listing(server_id, outcome)
            (server_dir / OPEN_FILE).unlink(missing_ok=True)
        except (OSError, ValueError, TypeError) as exc:
            log.warning("profile_recovery_failed", server_id=server_id, error=str(exc))
        finally:
            with self._lock:
                self._open.pop(server_id, None)
            with session.changed:
                outcome.done = True
                session.changed.notify_all()
            log.info("server_profile_recovered", server_id=server_id, **outcome.to_dict())

    # --- the listings (profiles.json) ---------------------------------------------------------

    def _listings(self, server_id: str) -> list[dict[str, Any]]:
        path = self._registry.server_dir(server_id) / PROFILES_FILE
        try:
            data = read_json(path)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("profiles_file_unreadable", path=str(path), error=str(exc))
            return []
        return (
            [p for p in data.get("profiles", []) if isinstance(p, dict)]
            if isinstance(data, dict)
            else []
        )

    def _append_listing(self, server_id: str, outcome: ProfileOutcome) -> None:
        path = self._registry.server_dir(server_id) / PROFILES_FILE
        profiles = [*self._listings(server_id), outcome.to_dict()]
        write_json_atomic(path, {"profiles": profiles})

    def kept_names(self, server_id: str) -> set[str]:
        """Every trace name this server's profiles listed: all FetchProfile will open."""
        names: set[str] = set()
        for listing in self._listings(server_id):
            names |= listed_in(listing)
        return names

    def close(self, timeout: float = 10.0) -> None:
        """End every open window (each sends its stop) and wait for them, up to ``timeout``."""
        self._closing.set()
        with self._lock:
            sessions = list(self._open.values())
        for session in sessions:
            session.end.set()
        deadline = time.monotonic() + timeout
        for session in sessions:
            if session.thread is not None:
                session.thread.join(max(0.0, deadline - time.monotonic()))


def _url(base: str, path_or_url: str) -> str:
    return path_or_url if path_or_url.startswith(("http://", "https://")) else base + path_or_url


def _names(folder: Path) -> list[str]:
    with contextlib.suppress(OSError):
        return os.listdir(folder)  # noqa: PTH208 (names only)
    return []


def _completed(url: str, counter: str) -> float | None:
    """The engine's completed-request counter (summed over its labels), or None."""
    try:
        reply = get(url, seconds=METRICS_TIMEOUT_S, max_body=16 << 20)
        text = reply.whole().decode("utf-8", errors="replace")
    except HttpFailure:
        return None
    if reply.status != 200:
        return None
    total = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == counter:
                    total = (total or 0.0) + sample.value
    except ValueError:
        return None
    if total is not None and not 0.0 <= total <= MAX_COMPLETED:
        return None  # NaN, inf or 1e300 from the engine: no count (issue 45.2)
    return total
