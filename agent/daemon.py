"""Assembling and running the agent daemon: GPU backend, server registry, gRPC service, metrics."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from types import FrameType

import structlog
from tunelab.serving import Daemon, start_daemon
from tunelab.v1 import agent_pb2_grpc

from agent.config import AgentConfig
from agent.gpu import GpuBackend, open_backend
from agent.servers.registry import ServerRegistry
from agent.servers.supervisor import SupervisorSettings
from agent.service import SERVICE_NAME, AgentIdentity, AgentService

log = structlog.get_logger(__name__)


class AgentApp:
    """Everything one agent process runs, built from its config; dependencies passed in."""

    def __init__(self, config: AgentConfig, gpu: GpuBackend | None = None) -> None:
        self.config = config
        self.identity = AgentIdentity(instance_id=uuid.uuid4().hex, started_at=time.time())
        self.gpu = gpu if gpu is not None else open_backend(config.nvml_snapshot)
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.registry = ServerRegistry(
            config.state_dir,
            self.gpu,
            SupervisorSettings(
                probe_interval=config.probe_interval,
                kill_timeout=config.kill_timeout,
                gpu_release_timeout=config.gpu_release_timeout,
            ),
        )
        self.daemon: Daemon | None = None

    def start(self) -> int:
        """Adopt surviving servers, then serve gRPC. Returns the bound port."""
        if not self.gpu.available():
            log.warning("gpu_metrics_off", reason=self.gpu.unavailable_reason())
        adopted = self.registry.adopt_existing()
        if adopted:
            log.info("servers_adopted", ids=adopted)
        service = AgentService(self.identity, self.registry, self.gpu)
        self.daemon = start_daemon(
            listen=self.config.listen,
            auth=self.config.auth(),
            register=lambda server: agent_pb2_grpc.add_AgentServicer_to_server(service, server),
            service_names=[SERVICE_NAME],
            reflection_enabled=self.config.reflection,
        )
        log.info(
            "agent_listening",
            listen=self.config.listen,
            port=self.daemon.port,
            instance_id=self.identity.instance_id,
        )
        return self.daemon.port

    def close(self, grace: float = 2.0) -> None:
        """Stop serving; leave inference servers running for the next agent to adopt."""
        if self.daemon is not None:
            self.daemon.stop(grace)
        self.registry.close()


def serve(config: AgentConfig) -> int:
    """Run until SIGTERM or SIGINT; returns the process exit code."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("agent_stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    app = AgentApp(config)
    log.info("agent_config", **config.redacted())
    app.start()
    try:
        while not stop.wait(3600):
            pass
    finally:
        app.close()
        log.info("agent_stopped")
    return 0
