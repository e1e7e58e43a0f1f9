"""The watch webhook: each verdict POSTed as Slack-compatible JSON, ``{"text": "..."}``, to the
URL in the controller's ``watch_webhook_url`` (docs/watch.md, "Webhook").

The scheduling turn only enqueues (``__call__`` never blocks and never raises): one thread
posts through tunelab.common.boundedhttp (``timeout`` is each request's total deadline, at most
``MAX_REPLY`` bytes of any answer are read, redirects are not followed; the thread survives
anything a receiver does), a failed one retried with doubling back-off up to
``attempts`` times (a 4xx other than 408 and 429 is not retried), then dropped with a log
line. The queue is bounded too (a receiver that hangs for hours costs at most ``max_queued``
messages, the oldest kept). The URL is a secret
(a Slack or Teams hook carries its key in the path): it is never logged, not even its host;
a log line names the watch, the occurrence and what failed (an HTTP status or the error's
kind).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from tunelab.analysis.watch import verdict_line
from tunelab.common.boundedhttp import HttpFailure, request
from tunelab.common.sanitize import printable, slack_text
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow
from tunelab.controller.watches.document import against, state_lines

log = structlog.get_logger(__name__)
MAX_TEXT = 3000  # characters of "text": Slack shows 40,000; a verdict fits in far less
MAX_REPLY = 4096  # bytes of the receiver's answer read (and ignored)
Post = Callable[[str, bytes, float], int]  # (url, body, timeout) -> HTTP status


def verdict_text(watch: str, occurrence: int, verdict: Mapping[str, Any]) -> str:
    """``watch nightly #5: regression against #1``, a verdict line per metric and a line per
    metric in the regression state (what alerts follow), at most ``MAX_TEXT`` characters."""
    lines = [f"tunelab watch {watch} #{occurrence}: {verdict['verdict']}{against(verdict)}"]
    if verdict.get("reason"):  # pooled or replaced baselines say so too
        lines.append(str(verdict["reason"]))
    changes = verdict.get("changes") or []
    lines += [verdict_line(row, changes) for row in verdict.get("metrics") or []]
    lines += state_lines(verdict)
    # what a server or checkpoint said (an engine version...) may be in it: printable lines,
    # Slack's <, >, & and @ escaped (no <!channel>, no forged link or mention)
    return slack_text("\n".join(lines), MAX_TEXT)


def http_post(url: str, body: bytes, timeout: float) -> int:
    """POST ``body`` as JSON; the HTTP status (an error status, a 3xx among them, is returned,
    not followed). ``timeout`` is the whole request's deadline; at most ``MAX_REPLY`` bytes of
    the answer are read (tunelab.common.boundedhttp; HttpFailure when there is no answer)."""
    headers = {"Content-Type": "application/json"}
    return request("POST", url, body, headers, seconds=timeout, max_body=MAX_REPLY).status


@dataclass(frozen=True)
class _Message:
    watch: str
    occurrence: int
    body: bytes


class VerdictWebhook:
    """``on_verdict`` for ``WatchDriver``; ``start()`` its poster thread, ``close()`` it."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        attempts: int = 4,
        backoff: float = 1.0,
        max_queued: int = 100,
        post: Post = http_post,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._attempts = attempts
        self._backoff = backoff
        self._post = post
        self._queue: queue.Queue[_Message] = queue.Queue(max_queued)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watch-webhook", daemon=True)
        self.delivered = 0  # counts, for tests and the log
        self.dropped = 0

    def __repr__(self) -> str:  # never the URL
        return "VerdictWebhook(url=(hidden))"

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop at once: a retry's wait ends; a request in flight ends within its timeout."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def __call__(self, watch: WatchRow, occurrence: OccurrenceRow, verdict: dict[str, Any]) -> None:
        text = verdict_text(watch.name, occurrence.number, verdict)
        message = _Message(watch.name, occurrence.number, json.dumps({"text": text}).encode())
        try:
            self._queue.put_nowait(message)
        except queue.Full:
            self.dropped += 1
            log.warning("watch_webhook_queue_full", watch=watch.name, occurrence=occurrence.number)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._deliver(message)
            except Exception as exc:
                self.dropped += 1
                log.warning("watch_webhook_failed", watch=message.watch, error=type(exc).__name__)

    def _deliver(self, message: _Message) -> None:
        failure = ""
        for attempt in range(self._attempts):
            if attempt and self._stop.wait(self._backoff * 2 ** (attempt - 1)):
                return
            try:
                status = self._post(self._url, message.body, self._timeout)
            except HttpFailure as exc:  # refused, reset, timed out, not HTTP/1.x
                failure = exc.kind
                continue
            except Exception as exc:
                failure = printable(type(exc).__name__, 64)
                continue
            if 200 <= status < 300:
                self.delivered += 1
                return
            failure = f"HTTP {status}"
            if 300 <= status < 400 or (400 <= status < 500 and status not in (408, 429)):
                break  # refused, or sent elsewhere (never followed): again will not help
        self.dropped += 1
        log.warning(
            "watch_webhook_failed",
            watch=message.watch,
            occurrence=message.occurrence,
            attempts=self._attempts,
            error=failure,
        )
