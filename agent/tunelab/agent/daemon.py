"""Assembling and running the agent daemon: GPU backend, server registry, gRPC service, metrics."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import structlog
from prometheus_client.registry import CollectorRegistry

from tunelab.agent.audit.provider import AuditProvider, gpu_for_audit
from tunelab.agent.config import AgentConfig
from tunelab.agent.gpu import GpuBackend, open_backend
from tunelab.agent.metrics.app import AgentMetrics, MetricsSettings
from tunelab.agent.quarantine import QuarantineList, StateHealthCollector
from tunelab.agent.runs.builtinjob import BuiltinJob
from tunelab.agent.runs.executor import RunExecutor
from tunelab.agent.runs.metrics import BenchMetricsCollector
from tunelab.agent.runs.provenance import RunProvenance
from tunelab.agent.servers.profiler import ServerProfiler
from tunelab.agent.servers.registry import ServerRegistry
from tunelab.agent.servers.supervisor import SupervisorSettings
from tunelab.agent.service import SERVICE_NAME, AgentIdentity, AgentService
from tunelab.agent.statedir import UntrustedStateDir
from tunelab.agent.statefile import StateDirBusy, StateDirLock
from tunelab.agent.statewriter import DurableWriter
from tunelab.agent.system import System
from tunelab.agent.timeline.recorder import TimelineSources
from tunelab.common import __version__
from tunelab.common.capacity import Limits
from tunelab.common.serving import Daemon, run_until_signalled, start_daemon
from tunelab.v1 import agent_pb2_grpc

log = structlog.get_logger(__name__)


class AgentApp:
    """Everything one agent process runs, built from its config; dependencies passed in."""

    def __init__(self, config: AgentConfig, gpu: GpuBackend | None = None) -> None:
        self.config = config
        # First, before anything in the state dir is read or changed: one agent per dir.
        self.state_lock = StateDirLock(config.state_dir)
        self.identity = AgentIdentity(instance_id=uuid.uuid4().hex, started_at=time.time())
        self.gpu = gpu if gpu is not None else open_backend(config.nvml_snapshot)
        # The host audit: RunAudit and the start-up run both refresh last_audit (for /metrics).
        self.last_audit: Mapping[str, Any] | None = None
        audit_system = System(config.sysfs_root)
        audit_gpu, audit_gpu_reason = gpu_for_audit(
            audit_system, self.gpu, config.nvml_snapshot is not None or gpu is not None
        )
        self.audit = AuditProvider(
            audit_system, audit_gpu, audit_gpu_reason, on_report=self._keep_audit
        )
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_writer = DurableWriter()
        self.quarantined = QuarantineList()
        self.registry = ServerRegistry(
            config.state_dir,
            self.gpu,
            SupervisorSettings(
                probe_interval=config.probe_interval,
                kill_timeout=config.kill_timeout,
                gpu_release_timeout=config.gpu_release_timeout,
            ),
            writer=self.state_writer,
            quarantined=self.quarantined,
        )
        self.profiler = ServerProfiler(self.registry)
        self.runs = RunExecutor(
            config.state_dir,
            self.registry,
            BuiltinJob,
            writer=self.state_writer,
            quarantined=self.quarantined,
            provenance=RunProvenance(self.gpu, time.time),
            datasets_dir=config.datasets_dir,
            timeline=TimelineSources(self.gpu, audit_system),
        )
        # Other parts register their collectors here; AgentMetrics serves it on /metrics.
        self.metrics_registry = CollectorRegistry()
        self.metrics_registry.register(BenchMetricsCollector(self.runs.live_progress))
        self.metrics_registry.register(
            StateHealthCollector(self.quarantined.count, self.state_writer.pending)
        )
        self.metrics = AgentMetrics(
            MetricsSettings(
                listen=config.metrics_listen,
                interval=config.sampler_interval,
                slow_interval=config.sampler_slow_interval,
                sysfs_root=config.sysfs_root,
            ),
            gpu=self.gpu,
            list_servers=self.registry.servers,
            registry=self.metrics_registry,
            last_audit=lambda: self.last_audit,
            version=__version__,
            instance_id=self.identity.instance_id,
            started_at=self.identity.started_at,
            measuring=self.runs.has_active,
        )
        self.daemon: Daemon | None = None

    def start(self) -> int:
        """Adopt surviving servers, then serve gRPC. Returns the bound port."""
        if not self.gpu.available():
            log.warning("gpu_metrics_off", reason=self.gpu.unavailable_reason())
        adopted = self.registry.adopt_existing()
        if adopted:
            log.info("servers_adopted", ids=adopted)
        left_open = self.profiler.recover()  # windows an earlier agent left open: stopped now
        if left_open:
            log.warning("profiles_left_open", ids=left_open)
        resumed = self.runs.adopt_existing()
        if resumed:
            log.info("runs_resumed", ids=resumed)
        self.metrics.start()
        service = AgentService(
            self.identity,
            self.registry,
            self.gpu,
            audit=self.audit,
            runs=self.runs,
            gpu_memory_by_server=self.metrics.gpu_memory_by_server,
            profiler=self.profiler,
        )
        self.daemon = start_daemon(
            listen=self.config.listen,
            auth=self.config.auth(),
            register=lambda server: agent_pb2_grpc.add_AgentServicer_to_server(service, server),
            service_names=[SERVICE_NAME],
            reflection_enabled=self.config.reflection,
            limits=Limits(streams=self.config.max_streams),
            stream_hint="close a `logs -f` or a watch, or raise max_streams "
            "(TUNELAB_AGENT_MAX_STREAMS)",
        )
        if self.config.audit_on_start:
            # One bounded run (well under a second) off the start-up path; daemon so it never
            # holds up shutdown.
            threading.Thread(
                target=self.audit, args=([],), name="audit-on-start", daemon=True
            ).start()
        log.info(
            "agent_listening",
            listen=self.config.listen,
            port=self.daemon.port,
            instance_id=self.identity.instance_id,
        )
        return self.daemon.port

    def _keep_audit(self, report: Mapping[str, Any]) -> None:
        self.last_audit = report

    def close(self, grace: float = 2.0) -> None:
        """Stop serving; leave inference servers running for the next agent to adopt."""
        if self.daemon is not None:
            self.daemon.stop(grace)
        self.metrics.close()
        self.profiler.close()  # every open window stopped (its server is never left profiling)
        self.runs.close()
        self.registry.close()
        self.state_writer.close()
        self.state_lock.release()


def serve(config: AgentConfig) -> int:
    """Run until SIGTERM or SIGINT; returns the process exit code (2: the state dir is held)."""
    try:
        app = AgentApp(config)
    except (StateDirBusy, UntrustedStateDir) as exc:
        print(f"tunelab-agent: {exc}", file=sys.stderr)
        return 2
    log.info("agent_config", **config.redacted())
    return run_until_signalled("agent", app.start, app.close)
