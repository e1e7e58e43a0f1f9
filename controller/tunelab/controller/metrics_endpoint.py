"""The controller's /metrics over the same bounded HTTP server as the agent's
(``tunelab.common.httpserve``): one event-loop thread whatever its clients do (prometheus_client's
``start_http_server`` was one thread per connection: 1,000 idle connections, 1,310 threads),
per-client caps, and idle connections giving way to a fresh scrape. Collecting reads the store,
so it runs on the server's small worker pool, never on the loop."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from tunelab.common.auth import split_host_port
from tunelab.common.httpserve import HttpServer, Limits, Request, Response
from tunelab.common.serving import bind_error

PATHS = ("/metrics", "/")


class RegistryApp:
    """``GET /metrics``: the registry in the format the scraper's Accept header asks for."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def __call__(self, request: Request) -> Response:
        if request.path not in PATHS:
            return Response(404, b"not found; the metrics are at /metrics\n")
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"GET or HEAD only\n", headers=(("Allow", "GET, HEAD"),))
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(200, encoder(self.registry), content_type)

    @staticmethod
    def blocking(request: Request) -> bool:
        return request.path in PATHS  # collection reads the store


def serve_metrics(
    listen: str, registry: CollectorRegistry, limits: Limits | None = None
) -> HttpServer:
    """A started server for ``registry`` on ``listen`` (``host:port``; port 0 picks one)."""
    host, port = split_host_port(listen)
    app = RegistryApp(registry)
    try:
        server = HttpServer(host, port, app, app.blocking, limits)
    except OSError as exc:
        raise bind_error("serve metrics on", listen, exc) from exc
    server.start()
    return server
