"""The HTTP endpoint: ``/metrics`` (text format, or OpenMetrics when the scraper asks for it;
gzip when accepted; ``name[]`` filtering as prometheus_client does it) and ``/metrics/engines``.

``/metrics`` is served from :class:`ExpositionCache` (rendered once per sampler cycle) straight
from the event loop; ``/metrics/engines`` fetches every engine when it is scraped, on the
server's worker pool, so a slow engine never delays ``/metrics``. A scrape that fails is logged
with its traceback, counted in ``tunelab_agent_scrape_errors_total{endpoint}``, and answered 500.
The server's own bounds (connections, idle timeout, threads) are in ``tunelab.common.httpserve``.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import structlog
from prometheus_client.exposition import choose_encoder, gzip_accepted

from tunelab.agent.metrics.cache import ExpositionCache
from tunelab.agent.metrics.engines import CONTENT_TYPE
from tunelab.agent.metrics.exposition import render
from tunelab.agent.metrics.self_metrics import ScrapeErrors
from tunelab.common.auth import split_host_port
from tunelab.common.httpserve import HttpServer, Limits, Request, Response
from tunelab.common.serving import bind_error

log = structlog.get_logger(__name__)

INDEX = b"tunelab-agent: /metrics (agent, GPUs, host, servers), /metrics/engines (engines)\n"
ENGINES = "/metrics/engines"


class MetricsApp:
    """Routing and negotiation behind the endpoint (called directly, without a socket, in tests)."""

    def __init__(
        self,
        registry: Any,
        cache: ExpositionCache,
        engines: Callable[[], str],
        scrape_errors: ScrapeErrors,
    ) -> None:
        self._registry = registry
        self._cache = cache
        self._engines = engines
        self._errors = scrape_errors

    @staticmethod
    def blocking(request: Request) -> bool:
        """Engines are fetched over the network: that reply is made on a worker thread."""
        return request.path == ENGINES

    def __call__(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"GET only\n", headers=(("Allow", "GET, HEAD"),))
        if request.path == "/":
            return Response(200, INDEX)
        if request.path not in ("/metrics", ENGINES):
            return Response(404, b"not found; try /metrics\n")
        gzipped = gzip_accepted(request.headers.get("accept-encoding", ""))
        content_type = CONTENT_TYPE
        try:
            if request.path == "/metrics":
                _, content_type = choose_encoder(request.headers.get("accept", ""))
                body = self._metrics(
                    request.query, content_type.startswith("application/openmetrics-text"), gzipped
                )
            else:
                body = self._engines().encode()
                if gzipped:
                    body = _gzip(body)
        except Exception:  # logged with its traceback, counted and answered 500: not hidden
            self._errors.inc(request.path)
            log.exception("metrics_scrape_failed", endpoint=request.path)
            return Response(500, b"scrape failed; see log\n")
        headers = (("Content-Encoding", "gzip"),) if gzipped else ()
        return Response(200, body, content_type, (*headers, ("Vary", "Accept, Accept-Encoding")))

    def _metrics(self, query: str, openmetrics: bool, gzipped: bool) -> bytes:
        names = parse_qs(query).get("name[]") if query else None
        if not names:
            return self._cache.body(openmetrics, gzipped)
        body = render(self._registry.restricted_registry(names), openmetrics)  # rare: uncached
        return _gzip(body) if gzipped else body


def _gzip(body: bytes) -> bytes:
    return gzip.compress(body, compresslevel=1)


class MetricsEndpoint:
    """Serves :class:`MetricsApp` on ``listen`` (``host:port``; port 0 picks one)."""

    def __init__(self, listen: str, app: MetricsApp, limits: Limits | None = None) -> None:
        host, port = split_host_port(listen)
        try:
            self._server = HttpServer(host, port, app, app.blocking, limits)
        except OSError as exc:
            raise bind_error("serve metrics on", listen, exc) from exc
        self.port: int = self._server.port
        self.stats = self._server.stats

    def start(self) -> None:
        self._server.start()

    def close(self) -> None:
        self._server.close()
