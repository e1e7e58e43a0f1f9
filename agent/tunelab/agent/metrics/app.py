"""Assembling the agent's metrics: sources, the sampler, collectors, the HTTP endpoint.

``AgentApp`` owns one :class:`AgentMetrics`. The Prometheus registry is passed in (the app owns
it as ``metrics_registry``) so other parts of the agent (the load generator, experiment runs)
register their own collectors into the same ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from prometheus_client import disable_created_metrics
from prometheus_client.registry import CollectorRegistry

from tunelab.agent.gpu import GpuBackend, GpuError, as_float
from tunelab.agent.metrics.audit import AuditCollector, LastAudit
from tunelab.agent.metrics.cache import ExpositionCache
from tunelab.agent.metrics.endpoint import MetricsApp, MetricsEndpoint
from tunelab.agent.metrics.energy import EnergyCollector, EnergyTracker
from tunelab.agent.metrics.engines import (
    DEFAULT_TIMEOUT,
    EngineScraper,
    EngineTarget,
    ready_targets,
)
from tunelab.agent.metrics.gpu_collector import GpuCollector
from tunelab.agent.metrics.gpu_source import GpuSource
from tunelab.agent.metrics.host import HostCollector, HostSource
from tunelab.agent.metrics.sampler import Sampler
from tunelab.agent.metrics.self_metrics import AgentCollector, ScrapeErrors
from tunelab.agent.metrics.servers import ListServers, ServerCollector, ServerSource
from tunelab.agent.system import System
from tunelab.common.httpserve import Limits

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class MetricsSettings:
    listen: str = ""  # empty: sample (for gRPC's per-server GPU memory) but serve no HTTP
    interval: float = 1.0
    slow_interval: float = 15.0
    sysfs_root: Path = Path("/")
    engine_timeout: float = DEFAULT_TIMEOUT
    # read the energy counter every fast tick on GPUs with work (else only power is integrated
    # between slow reads): benchmarks/results/energy_check.md has the cost and accuracy of both
    energy_fast: bool = True
    # a scrape reads each GPU's power (µs) to extrapolate energy: puts NVML on the scrape path
    energy_live_power: bool = False
    http: Limits = field(default_factory=Limits)


class AgentMetrics:
    def __init__(
        self,
        settings: MetricsSettings,
        *,
        gpu: GpuBackend,
        list_servers: ListServers,
        registry: CollectorRegistry,
        last_audit: LastAudit,
        version: str,
        instance_id: str,
        started_at: float,
        measuring: Callable[[], bool] = lambda: False,
    ) -> None:
        """``measuring`` says whether a run of the agent is in progress: then every GPU's energy
        counter is read each fast tick (its tokens per joule need the exact counter); otherwise
        only GPUs with a compute process are (one read costs 3.2 ms of CPU on the H200)."""
        disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide: no *_created
        self.settings = settings
        self.registry = registry
        self.energy = EnergyTracker(
            max_extrapolation=2 * settings.interval,
            live_power=self._live_power if settings.energy_live_power else None,
        )
        self.gpu_source = GpuSource(
            gpu,
            energy=self.energy,
            busy=measuring,
            energy_fast=settings.energy_fast,
        )
        self.host_source = HostSource(System(settings.sysfs_root))
        self.server_source = ServerSource(list_servers, lambda: self.gpu_source.latest.processes)
        self.sampler = Sampler(
            [self.gpu_source, self.host_source, self.server_source],
            settings.interval,
            settings.slow_interval,
        )
        self.scrape_errors = ScrapeErrors()
        self.engines = EngineScraper(self._engine_targets, timeout=settings.engine_timeout)
        for collector in (
            AgentCollector(
                version=version,
                instance_id=instance_id,
                started_at=started_at,
                gpu_enabled=self.gpu_source.enabled,
                sampler=self.sampler,
                scrape_errors=self.scrape_errors,
                http_stats=lambda: self.endpoint.stats if self.endpoint is not None else None,
            ),
            GpuCollector(self.gpu_source),
            EnergyCollector(self.energy),
            HostCollector(self.host_source),
            ServerCollector(self.server_source),
            AuditCollector(last_audit),
        ):
            registry.register(collector)
        self.cache = ExpositionCache(
            registry,
            EnergyCollector(self.energy),
            generation=lambda: self.sampler.generation,
            max_age=settings.interval,
        )
        self.endpoint: MetricsEndpoint | None = None

    def _live_power(self, index: int) -> float | None:
        try:
            return as_float(self.gpu_source.backend.read(index, "power_watts"))
        except GpuError:
            return None

    def _engine_targets(self) -> list[EngineTarget]:
        return ready_targets((s.name, s.state, s.port) for s in self.server_source.latest.servers)

    @property
    def port(self) -> int | None:
        return self.endpoint.port if self.endpoint is not None else None

    def start(self) -> None:
        """Start sampling; serve HTTP when a listen address is set (BindError if it cannot)."""
        if self.settings.interval < 1.0:
            log.warning(
                "metrics_fast_sampling",
                interval=self.settings.interval,
                note="below 1 s, sampling can cost decode latency on the GPU being measured",
            )
        if self.settings.listen:
            self.endpoint = MetricsEndpoint(
                self.settings.listen,
                MetricsApp(self.registry, self.cache, self.engines.exposition, self.scrape_errors),
                self.settings.http,
            )
        self.sampler.start()
        if self.endpoint is not None:
            self.endpoint.start()
            log.info("metrics_listening", listen=self.settings.listen, port=self.endpoint.port)

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close()
        self.sampler.close()
        self.engines.close()

    def gpu_memory_by_server(self) -> dict[str, int]:
        """GPU memory per server id from the last sample (AgentService's callable)."""
        return self.server_source.gpu_memory_by_server()
