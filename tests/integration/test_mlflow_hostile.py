"""Integration: a hostile MLflow tracking server is an export failure, never the controller's
memory (issue 36.3). The server is a real HTTP server on loopback; MLflow's real client talks
to it through the sink. Each connection's bytes sent are counted: the client must hang up
long before the body ends (the old sink read it whole: 2.5 GB in 15 s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tunelab.analysis.mlflow import bounds as mlflowbounds
from tunelab.analysis.mlflow.sink import MlflowSink, MlflowUnavailable
from tunelab.controller.mlflow.export import MlflowExporter
from tunelab.controller.store import SqliteStore

BODY_LIMIT = 256 << 20  # where the hostile server gives up: what the old client read whole
CAP = 1 << 20
SLACK = 32 << 20  # loopback socket buffers the server can fill before it sees the hang-up
CHUNK = b"x" * (64 << 10)


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "declared"
    sent: list[int]
    requests_seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        self.requests_seen.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.mode == "declared":
            self.send_header("Content-Length", "4000000000")
        else:  # no length: the body ends when the connection does
            self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        try:
            while sent < BODY_LIMIT:
                self.wfile.write(CHUNK if self.mode != "drip" else b" ")
                sent += len(CHUNK) if self.mode != "drip" else 1
                if self.mode == "drip":
                    time.sleep(0.01)
        except OSError:  # the client hung up: what we want
            pass
        finally:
            self.sent.append(sent)
            self.close_connection = True

    do_GET = do_POST = _answer


def serve(mode: str) -> Iterator[tuple[str, type[Hostile]]]:
    handler = type("H", (Hostile,), {"mode": mode, "sent": [], "requests_seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def declared() -> Iterator[tuple[str, type[Hostile]]]:
    yield from serve("declared")


@pytest.fixture
def endless() -> Iterator[tuple[str, type[Hostile]]]:
    yield from serve("endless")


@pytest.fixture
def drip() -> Iterator[tuple[str, type[Hostile]]]:
    yield from serve("drip")


def wait_sent(handler: type[Hostile], count: int) -> list[int]:
    deadline = time.monotonic() + 60
    while len(handler.sent) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(handler.sent)


def test_a_4_gb_content_length_is_refused_before_its_body_is_read(
    declared: tuple[str, type[Hostile]],
) -> None:
    uri, handler = declared
    sink = MlflowSink(uri, "tunelab", max_response_bytes=CAP)
    with pytest.raises(MlflowUnavailable) as failed:
        sink.known_runs()
    assert "more than 1048576" in str(failed.value), failed.value
    sent = wait_sent(handler, len(handler.requests_seen))
    assert sent and max(sent) < SLACK, sent  # the old client read all 256 MiB


def test_an_endless_body_without_a_length_stops_at_the_cap(
    endless: tuple[str, type[Hostile]],
) -> None:
    uri, handler = endless
    sink = MlflowSink(uri, "tunelab", max_response_bytes=CAP)
    with pytest.raises(MlflowUnavailable) as failed:
        sink.experiment_id()
    assert "larger than 1048576 bytes" in str(failed.value), failed.value
    sent = wait_sent(handler, len(handler.requests_seen))
    assert sent and max(sent) < CAP + SLACK, sent


def test_a_body_dripping_past_the_calls_deadline_is_cut(drip: tuple[str, type[Hostile]]) -> None:
    uri, handler = drip
    sink = MlflowSink(uri, "tunelab", call_seconds=0.5)
    with pytest.raises(MlflowUnavailable) as failed:
        sink.experiment_id()
    assert "deadline" in str(failed.value), failed.value
    sent = wait_sent(handler, len(handler.requests_seen))
    assert sent and max(sent) < BODY_LIMIT, sent


def test_the_exporter_takes_it_as_a_failure_and_backs_off(
    tmp_path: Path, declared: tuple[str, type[Hostile]]
) -> None:
    uri, handler = declared
    store = SqliteStore(tmp_path / "c.db")
    exporter = MlflowExporter(
        store, lambda: MlflowSink(uri, "tunelab", max_response_bytes=CAP), interval=0.2
    )
    with capture_logs() as logs:
        exporter.start()
        deadline = time.monotonic() + 30
        while len(handler.requests_seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        exporter.close()
    store.close()
    failed = [e for e in logs if e["event"] == "mlflow_export_failed"]
    assert len(failed) == 1, logs  # said once while it stays down
    assert failed[0]["retry_in_s"] == 0.2 and "more than 1048576" in failed[0]["error"]
    assert len(handler.requests_seen) >= 3  # and tried again: 0.2 s, 0.4 s, ... apart
    assert max(wait_sent(handler, len(handler.requests_seen))) < SLACK


def test_outside_a_bounded_call_requests_is_left_alone(
    endless: tuple[str, type[Hostile]],
) -> None:
    import requests

    mlflowbounds.install()
    uri, _ = endless
    with requests.get(uri, stream=True, timeout=10) as answer:
        assert not isinstance(answer.raw, mlflowbounds.BoundedBody)


def test_a_tracking_uri_mlflow_refuses_keeps_the_exporter_alive_and_logged_once(
    tmp_path: Path,
) -> None:
    """Issue 45.3: MLflow's own client refuses the URI (an MlflowException, not ours) at every
    pass: the exporter thread logged nothing and died for good. It must live, say it once and
    try again with back-off, making the client again each time."""
    made: list[int] = []

    def sink() -> MlflowSink:
        made.append(1)
        return MlflowSink("nosuchscheme://tracking", "tunelab")

    exporter = MlflowExporter(SqliteStore(tmp_path / "c.db"), sink, interval=0.01)
    with capture_logs() as logs:
        exporter.start()
        deadline = time.monotonic() + 60
        while len(made) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        alive = exporter._thread.is_alive()
        exporter.close()
    assert len(made) >= 4 and alive  # tried again and again: the thread lived on
    failed = [e for e in logs if e["event"] == "mlflow_export_failed"]
    assert len(failed) == 1  # said once, not once per pass
    assert "unsupported URI 'nosuchscheme://tracking'" in failed[0]["error"]
    assert len(failed[0]["error"]) <= 300 and "\n" not in failed[0]["error"]
