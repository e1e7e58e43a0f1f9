"""The WSGI app behind /metrics, called directly: routing, negotiation and failed scrapes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import Metric
from structlog.testing import capture_logs

from tunelab.agent.metrics.endpoint import MetricsApp
from tunelab.agent.metrics.self_metrics import ScrapeErrors


class Broken:
    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        raise RuntimeError("a collector bug")


def call(
    app: MetricsApp, path: str, method: str = "GET", **headers: str
) -> tuple[str, dict[str, str], bytes]:
    seen: dict[str, Any] = {}

    def start_response(status: str, header_list: list[tuple[str, str]]) -> None:
        seen["status"], seen["headers"] = status, dict(header_list)

    path_info, _, query = path.partition("?")
    environ = {"PATH_INFO": path_info, "QUERY_STRING": query, "REQUEST_METHOD": method, **headers}
    body = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], body


def test_routes_formats_and_a_failing_collector() -> None:
    registry = CollectorRegistry()
    Gauge("tunelab_test_up", "Up.", registry=registry).set(1)
    errors = ScrapeErrors()
    app = MetricsApp(registry, lambda: 'engine_up{server="a"} 1\n', errors)

    status, headers, body = call(app, "/metrics")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"tunelab_test_up 1.0" in body
    status, headers, body = call(
        app, "/metrics", HTTP_ACCEPT="application/openmetrics-text;version=1.0.0"
    )
    assert headers["Content-Type"].startswith("application/openmetrics-text") and body.endswith(
        b"# EOF\n"
    )
    assert call(app, "/metrics/engines")[2] == b'engine_up{server="a"} 1\n'
    assert call(app, "/")[0] == "200 OK"
    assert call(app, "/favicon.ico")[0].startswith("404")
    assert call(app, "/metrics", method="POST")[0].startswith("405")

    registry.register(Broken())
    with capture_logs() as logs:
        status, _, _ = call(app, "/metrics")
    assert status.startswith("500")
    assert errors.counts() == {"/metrics": 1}
    assert [e["event"] for e in logs] == ["metrics_scrape_failed"]
    assert logs[0]["exc_info"] is True
