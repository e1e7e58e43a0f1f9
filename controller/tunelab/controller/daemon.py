"""Assembling and running the controller: store, agent client, loop, scraper, gRPC, /metrics."""

from __future__ import annotations

import sys

import structlog
from prometheus_client import disable_created_metrics

from tunelab.analysis.mlflow.sink import MlflowSink
from tunelab.common.auth import read_token
from tunelab.common.capacity import Limits
from tunelab.common.httpserve import HttpServer
from tunelab.common.serving import Daemon, run_until_signalled, start_daemon
from tunelab.controller.agent_client import GrpcAgentClient
from tunelab.controller.config import ControllerConfig
from tunelab.controller.dispatch import AttemptDriver, DriverSettings
from tunelab.controller.hosts import HostMonitor
from tunelab.controller.loop import ControlLoop
from tunelab.controller.metrics import ControllerMetrics
from tunelab.controller.metrics_endpoint import serve_metrics
from tunelab.controller.mlflow.export import MlflowExporter
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.scrape import MetricsScraper, ScrapeTarget
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.service import SERVICE_NAME, ControllerService
from tunelab.controller.slurm.commands import SlurmCli
from tunelab.controller.slurm.driver import SlurmDriver
from tunelab.controller.slurm.folder import UntrustedJobsFolder
from tunelab.controller.spec.limits import SpecLimits
from tunelab.controller.states import AttemptState
from tunelab.controller.store import StoreError
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.factory import open_store, redact
from tunelab.controller.watches.driver import WatchDriver
from tunelab.controller.watches.webhook import VerdictWebhook
from tunelab.v1 import controller_pb2_grpc

log = structlog.get_logger(__name__)
SCRAPED_STATES = (AttemptState.STARTING, AttemptState.READY, AttemptState.BENCHMARKING)


class ControllerApp:
    def __init__(self, config: ControllerConfig) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide: no *_created
        self.config = config
        self.store = open_store(config.db, config.secrets_path(), config.db_turn_lease)
        self.agents = GrpcAgentClient(
            read_token(config.agent_token_file),
            config.agent_call_timeout,
            config.agent_start_timeout,
        )
        self.metrics = ControllerMetrics(
            self.store, config.results_retention_count, config.results_retention_age
        )
        self.scraper = MetricsScraper(self._scrape_targets, config.scrape_interval)
        self.driver = AttemptDriver(
            self.store,
            self.agents,
            self.scraper,
            DriverSettings(config.unknown_after_failures, config.lease_timeout),
            on_dispatch_latency=self.metrics.dispatch_latency.observe,
            on_agent_error=self.metrics.count_agent_error,
            clock=self.store.now,  # leases by the database's clock: one clock for every controller
        )
        self.webhook = (
            VerdictWebhook(config.watch_webhook_url, timeout=config.watch_webhook_timeout)
            if config.watch_webhook_url
            else None
        )
        self.slurm_cli = SlurmCli()
        self.slurm: SlurmDriver | None = None
        if isinstance(self.store, SqlStore):  # both engines' stores; not a test's fake
            self.slurm = SlurmDriver(
                self.store,
                self.driver,
                self.slurm_cli,
                config.slurm_path(),
                config.slurm_report_address or config.listen,
                config.slurm_agent_command,
                clock=self.store.now,
            )
            try:
                self.slurm.check_folder()  # a planted folder or key refuses the start (one line)
            except UntrustedJobsFolder as exc:
                if self.store.slurm_pools():
                    self.store.close()
                    raise
                # no pool: the folder is never used, and another user's folder at <db>.slurm
                # must not keep this controller down; adding a pool is refused until it is fixed
                log.warning("slurm_jobs_folder_untrusted", error=str(exc), pools=0)
        self.loop = ControlLoop(
            HostMonitor(
                self.store,
                self.agents,
                config.host_poll_interval,
                config.unknown_after_failures,
                on_active_runs=self.driver.fence,
                clock=self.store.now,
            ),
            Scheduler(self.store, clock=self.store.now, pools=self._pool_capacity),
            self.driver,
            slurm=self.slurm,
            tick=config.tick,
            attempt_poll_interval=config.attempt_poll_interval,
            workers=config.workers,
            on_pass=self.metrics.scheduling_pass.observe,
            searches=SearchDriver(self.store, self.store.now).tick,
            watches=WatchDriver(
                self.store,
                self.store.now,
                on_verdict=self.webhook or WatchDriver.no_hook,
                limits=SpecLimits(max_variants=config.max_variants),
            ).tick,
        )
        self.exporter = self._exporter(config)
        self.daemon: Daemon | None = None
        self.metrics_server: HttpServer | None = None

    def _exporter(self, config: ControllerConfig) -> MlflowExporter | None:
        if not config.mlflow_tracking_uri:
            return None
        uri, experiment = config.mlflow_tracking_uri, config.mlflow_experiment
        return MlflowExporter(
            self.store, lambda: MlflowSink(uri, experiment), interval=config.mlflow_interval
        )

    def _pool_capacity(self) -> dict[str, int]:
        """Slurm pools' max_jobs, by name, for the scheduling pass."""
        return {
            name: int(config.get("max_jobs", 16))
            for name, config in (self.slurm.pools() if self.slurm else {}).items()
        }

    def _scrape_targets(self) -> list[ScrapeTarget]:
        hosts = {h.name: h for h in self.store.list_hosts()}
        targets = []
        for attempt in self.store.live_attempts():
            host = hosts.get(attempt.host)
            if host is None or not host.metrics_url or attempt.state not in SCRAPED_STATES:
                continue
            benchmarking = attempt.state is AttemptState.BENCHMARKING
            targets.append(ScrapeTarget(attempt.id, host.metrics_url, attempt.gpus, benchmarking))
        return targets

    def start(self) -> int:
        """Resume from the database (nothing is bulk-failed), then serve."""
        live = self.store.live_attempts()
        if live:
            log.info("reconciling", attempts=[a.id for a in live])
        service = ControllerService(
            self.store,
            self.agents,
            wake=lambda poll_hosts: self.loop.wake(poll_hosts),
            default_agent_token=read_token(self.config.agent_token_file),
            default_metrics_port=self.config.default_metrics_port,
            spec_limits=SpecLimits(max_variants=self.config.max_variants),
            clock=self.store.now,  # every timestamp of a row by the database's clock
            slurm=self.slurm,
        )
        self.daemon = start_daemon(
            listen=self.config.listen,
            auth=self.config.auth(),
            register=lambda server: controller_pb2_grpc.add_ControllerServicer_to_server(
                service, server
            ),
            service_names=[SERVICE_NAME],
            limits=Limits(streams=self.config.max_streams),
            stream_hint="close a `logs -f` or `submit --wait`, or raise max_streams "
            "(TUNELAB_CONTROLLER_MAX_STREAMS)",
        )
        if self.config.metrics_listen:
            self.metrics_server = serve_metrics(self.config.metrics_listen, self.metrics.registry)
        self.loop.start()
        self.loop.wake(poll_hosts=True)
        self.scraper.start()
        if self.exporter is not None:
            self.exporter.start()
        if self.webhook is not None:
            self.webhook.start()
        log.info(
            "controller_listening",
            listen=self.config.listen,
            port=self.daemon.port,
            db=redact(self.config.db),
        )
        return self.daemon.port

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.stop(2.0)
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.loop.close()
        self.scraper.close()
        if self.exporter is not None:
            self.exporter.close()
        if self.webhook is not None:
            self.webhook.close()
        self.agents.close()
        self.store.close()


def serve(config: ControllerConfig) -> int:
    """Run until SIGTERM or SIGINT; returns the process exit code (2: the database cannot be
    opened for writing, said in one line)."""
    try:
        app = ControllerApp(config)
    except (StoreError, UntrustedJobsFolder) as exc:
        print(f"tunelab controller: {exc}", file=sys.stderr)
        return 2
    log.info("controller_config", **config.redacted())
    return run_until_signalled("controller", app.start, app.close)
