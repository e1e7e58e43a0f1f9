"""The HTTP endpoint: ``/metrics`` (text format, or OpenMetrics when the scraper asks for it;
gzip when accepted; ``name[]`` filtering as prometheus_client does it) and ``/metrics/engines``.

Each request runs on its own thread, so a slow ``/metrics/engines`` never delays ``/metrics``.
A scrape that fails is logged with its traceback, counted in
``tunelab_agent_scrape_errors_total{endpoint}``, and answered 500.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from tunelab.agent.metrics.engines import CONTENT_TYPE
from tunelab.agent.metrics.exposition import render
from tunelab.agent.metrics.self_metrics import ScrapeErrors
from tunelab.common.auth import split_host_port
from tunelab.common.serving import BindError

log = structlog.get_logger(__name__)

StartResponse = Callable[..., Any]
Environ = dict[str, Any]
INDEX = b"tunelab-agent: /metrics (agent, GPUs, host, servers), /metrics/engines (engines)\n"


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _IPv6Server(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds are not news."""


class MetricsApp:
    """The WSGI application behind the endpoint (also usable without a socket in tests)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        engines: Callable[[], str],
        scrape_errors: ScrapeErrors,
    ) -> None:
        self._registry = registry
        self._engines = engines
        self._errors = scrape_errors

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _reply(start_response, "405 Method Not Allowed", b"GET only\n")
        if path == "/":
            return _reply(start_response, "200 OK", INDEX)
        if path not in ("/metrics", "/metrics/engines"):
            return _reply(start_response, "404 Not Found", b"not found; try /metrics\n")
        content_type = CONTENT_TYPE
        try:
            if path == "/metrics":
                _, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
                body = render(
                    self._collector(environ.get("QUERY_STRING", "")),
                    openmetrics=content_type.startswith("application/openmetrics-text"),
                )
            else:
                body = self._engines().encode()
        except Exception:  # logged with its traceback, counted and answered 500: not hidden
            self._errors.inc(path)
            log.exception("metrics_scrape_failed", endpoint=path)
            return _reply(start_response, "500 Internal Server Error", b"scrape failed; see log\n")
        headers = []
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        return _reply(start_response, "200 OK", body, content_type, headers)

    def _collector(self, query: str) -> Any:
        names = parse_qs(query).get("name[]")
        return self._registry.restricted_registry(names) if names else self._registry


def _reply(
    start_response: StartResponse,
    status: str,
    body: bytes,
    content_type: str = "text/plain",
    extra: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *(extra or [])]
    start_response(status, headers)
    return [body]


class MetricsEndpoint:
    """Serves :class:`MetricsApp` on ``listen`` (``host:port``; port 0 picks one)."""

    def __init__(self, listen: str, app: MetricsApp) -> None:
        host, port = split_host_port(listen)
        server_class = _IPv6Server if ":" in host else _ThreadingServer
        try:
            self._server = make_server(
                host, port, app, server_class=server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise BindError(f"cannot serve metrics on {listen}: {exc.strerror or exc}") from exc
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5}, name="metrics-http"
        )
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
