"""A real controller service on loopback over a given store, for tests and benchmarks that talk
to it through gRPC (the CLI included) without a controller process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.ports import free_port
from tunelab.common.auth import ServerAuth
from tunelab.common.capacity import Limits
from tunelab.common.serving import Daemon, start_daemon
from tunelab.controller.agent_client import GrpcAgentClient
from tunelab.controller.service import SERVICE_NAME, ControllerService
from tunelab.controller.store.base import Store
from tunelab.v1 import controller_pb2_grpc


@contextmanager
def serve_controller(store: Store) -> Iterator[Daemon]:
    """The daemon serving ``store`` (its ``port``); stopped on exit, the store left open."""
    agents = GrpcAgentClient(info_deadline=1.0)
    service = ControllerService(store, agents, wake=lambda poll_hosts: None)
    daemon = start_daemon(
        listen=f"127.0.0.1:{free_port()}",
        auth=ServerAuth(),
        register=lambda s: controller_pb2_grpc.add_ControllerServicer_to_server(service, s),
        service_names=[SERVICE_NAME],
        limits=Limits(unary=4, streams=2),
    )
    try:
        yield daemon
    finally:
        daemon.stop(1.0)
        agents.close()
