"""The app behind /metrics, called directly: routing, negotiation and failed scrapes."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import Metric
from structlog.testing import capture_logs

from tunelab.agent.metrics.cache import ExpositionCache
from tunelab.agent.metrics.endpoint import MetricsApp
from tunelab.agent.metrics.energy import EnergyCollector, EnergyTracker
from tunelab.agent.metrics.self_metrics import ScrapeErrors
from tunelab.common.httpserve import Request


class Broken:
    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        raise RuntimeError("a collector bug")


def call(
    app: MetricsApp, path: str, method: str = "GET", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    target, _, query = path.partition("?")
    reply = app(Request(method, target, query, headers, keep_alive=True))
    return reply.status, {"Content-Type": reply.content_type, **dict(reply.headers)}, reply.body


def make_app(registry: CollectorRegistry, errors: ScrapeErrors) -> MetricsApp:
    live = EnergyCollector(EnergyTracker())
    cache = ExpositionCache(registry, live, generation=lambda: 0, max_age=0.0)
    return MetricsApp(registry, cache, lambda: 'engine_up{server="a"} 1\n', errors)


def test_routes_formats_and_a_failing_collector() -> None:
    registry = CollectorRegistry()
    Gauge("tunelab_test_up", "Up.", registry=registry).set(1)
    errors = ScrapeErrors()
    app = make_app(registry, errors)

    status, headers, body = call(app, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"tunelab_test_up 1.0" in body
    status, headers, body = call(
        app, "/metrics", accept="application/openmetrics-text;version=1.0.0"
    )
    assert headers["Content-Type"].startswith("application/openmetrics-text") and body.endswith(
        b"# EOF\n"
    )
    assert call(app, "/metrics/engines")[2] == b'engine_up{server="a"} 1\n'
    assert call(app, "/")[0] == 200
    assert call(app, "/favicon.ico")[0] == 404
    assert call(app, "/metrics", method="POST")[0] == 405

    registry.register(Broken())
    with capture_logs() as logs:
        status, _, _ = call(app, "/metrics")
    assert status == 500
    assert errors.counts() == {"/metrics": 1}
    assert [e["event"] for e in logs] == ["metrics_scrape_failed"]
    assert logs[0]["exc_info"] is True
