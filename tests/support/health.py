"""Waiting for a daemon started by a test to answer its gRPC health check."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def wait_serving(
    address: str,
    proc: subprocess.Popen[bytes] | None,
    timeout: float,
    what: str,
    log: Callable[[], str],
) -> None:
    """Return once ``address`` is SERVING; raise with the daemon's log if it exits or stalls."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log()[-20000:]}")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    raise TimeoutError(f"{what} not serving after {timeout}s:\n{log()[-20000:]}")
