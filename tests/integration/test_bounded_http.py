"""Integration: the one bounded HTTP client against hostile receivers on loopback (issue 45.4):
an endless 302 (urllib read it whole: the controller went from 140 MB to 1.5 GB), a slowloris
answer (a per-read timeout never fires), 302 loops and redirects to an internal URL, a garbage
status line (it killed the webhook's poster thread), a gRPC port's HTTP/2 frames (they reached
the log)."""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent import futures
from typing import Any

import grpc
import pytest
import requests
import structlog

from tests.support.hostile_http import answer, endless, garbage, hostile, slowloris
from tunelab.agent.metrics.engines import fetch_metrics
from tunelab.analysis.mlflow.bounds import bounded
from tunelab.bench.chattemplate import ChatTemplateError, server_chat_prompts
from tunelab.bench.profiling import post
from tunelab.common.boundedhttp import HttpFailure, get, request
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow
from tunelab.controller.watches.webhook import VerdictWebhook

CAP = 4096


def test_an_endless_302_body_is_read_up_to_the_cap_and_not_followed() -> None:
    with (
        hostile(answer(200, b"internal")) as internal,
        hostile(endless(302, internal.url.encode() + b"/admin")) as server,
    ):
        reply = request("POST", server.url + "/hook", b"{}", seconds=10, max_body=CAP)
        assert reply.status == 302 and reply.truncated and len(reply.body) == CAP
        with pytest.raises(HttpFailure, match="ResponseTooLarge"):
            reply.whole()
        assert internal.requests == []  # the redirect to an internal URL was never followed
        assert len(server.requests) == 1


def test_a_302_loop_is_one_request() -> None:
    with hostile(answer(302, b"", b"Location: /again\r\n")) as server:
        assert request("GET", server.url, seconds=10, max_body=CAP).status == 302
        assert len(server.requests) == 1


def test_a_slowloris_answer_ends_at_the_total_deadline() -> None:
    with hostile(slowloris()) as server:
        with pytest.raises(HttpFailure) as info:
            get(server.url, seconds=1.0, max_body=CAP)
        # bytes kept coming all along, so a per-read timeout never fires: only a deadline over
        # the whole request ends it with a timeout (a regression hangs into pytest's timeout)
        assert info.value.kind in ("TimeoutError", "timeout")
        assert len(server.requests) == 1


def test_a_garbage_status_line_is_one_printable_failure() -> None:
    with hostile(garbage()) as server, pytest.raises(HttpFailure) as info:
        get(server.url, seconds=5, max_body=CAP)
    assert info.value.kind == "BadStatusLine" and info.value.protocol
    assert "\x1b" not in str(info.value) and "BANANA" not in str(info.value)


def test_a_grpc_port_is_not_http_and_its_frames_are_not_shown() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(HttpFailure) as info:
            request("POST", f"http://127.0.0.1:{port}/hook", b"{}", seconds=5, max_body=CAP)
    finally:
        server.stop(None)
    text = str(info.value)
    assert text.isprintable() and "\x00" not in text, text


def test_too_many_headers_are_refused() -> None:
    many = b"".join(b"X-%d: y\r\n" % i for i in range(200))
    refused = pytest.raises(HttpFailure, match=r"more than 100 headers")
    with hostile(answer(200, b"ok", many)) as server, refused:
        get(server.url, seconds=5, max_body=CAP)


def test_a_refused_connection_is_a_failure_not_an_oserror() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(HttpFailure, match="ConnectionRefusedError"):
        get(f"http://127.0.0.1:{port}/", seconds=5, max_body=CAP)


def _verdict() -> dict[str, Any]:
    return {"verdict": "regression", "baseline": 1, "reason": "", "metrics": []}


def _rows(name: str, number: int) -> tuple[WatchRow, OccurrenceRow]:
    watch: Any = type("W", (), {"name": name})()
    occurrence: Any = type("O", (), {"number": number})()
    return watch, occurrence


def test_the_webhook_poster_survives_a_bad_status_line_and_an_endless_302() -> None:
    ok = answer(200, b"ok")
    with hostile(garbage(), endless(302), ok) as server:
        webhook = VerdictWebhook(server.url + "/hook", timeout=5.0, attempts=2, backoff=0.01)
        webhook.start()
        try:
            with structlog.testing.capture_logs() as logs:
                webhook(*_rows("w", 1), _verdict())  # garbage, then the endless 302: dropped
                deadline = time.monotonic() + 30
                while webhook.dropped < 1 and time.monotonic() < deadline:
                    time.sleep(0.02)
                webhook(*_rows("w", 2), _verdict())  # the same thread delivers the next one
                while webhook.delivered < 1 and time.monotonic() < deadline:
                    time.sleep(0.02)
        finally:
            webhook.close()
    assert webhook.dropped == 1 and webhook.delivered == 1
    (line,) = [entry for entry in logs if entry["event"] == "watch_webhook_failed"]
    assert line["error"] == "HTTP 302" and line["occurrence"] == 1


def test_engine_metrics_and_the_chat_template_step_stop_at_their_caps() -> None:
    with hostile(endless(200)) as server, pytest.raises(HttpFailure, match="larger than"):
        fetch_metrics(server.port, 5.0)
    with hostile(endless(302)) as server, pytest.raises(ChatTemplateError, match="HTTP 302"):
        server_chat_prompts(lambda path: server.url + path, "m", ["hi", "there"], 5.0)


def test_the_profilers_start_and_stop_calls_read_little_and_follow_no_redirect() -> None:
    with (
        hostile(answer(200, b"internal")) as internal,
        hostile(endless(302, internal.url.encode() + b"/admin")) as server,
    ):
        outcome = asyncio.run(post(server.url + "/start_profile", b"{}", 10.0))
        assert outcome.status == 302 and not outcome.ok
        assert outcome.error.startswith("HTTP 302") and len(outcome.error) < 400
        assert internal.requests == []


def test_mlflow_calls_follow_no_redirect() -> None:
    with (
        hostile(answer(200, b"{}")) as internal,
        hostile(answer(302, b"", b"Location: " + internal.url.encode() + b"/admin\r\n")) as server,
    ):
        session = requests.Session()
        with bounded():
            reply = session.get(server.url + "/api/2.0/mlflow/runs/get", timeout=5)
        assert reply.status_code == 302 and internal.requests == []
        outside = session.get(server.url, timeout=5)  # requests elsewhere in the process: as is
        assert outside.status_code == 200 and len(internal.requests) == 1
