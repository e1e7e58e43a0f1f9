"""Building a tunelab gRPC daemon: thread pool, port ownership, auth, health and reflection.

Limits on what one caller can make a daemon hold (README, "Limits"): a request message of at
most ``MAX_REQUEST_BYTES``, request metadata of at most ``MAX_METADATA_BYTES``, ``Limits.unary``
unary calls, ``Limits.streams`` open streams and ``Limits.health_watches`` health watches at once
(``capacity``), calls refused or capped before a thread waits for their message and a deadline on
that wait (``admission``), and at most ``QUEUED_CALLS_FACTOR`` x the pool's threads calls accepted
in all; beyond any of these the caller gets RESOURCE_EXHAUSTED (or UNAUTHENTICATED, or
DEADLINE_EXCEEDED for a request never sent), never a hang.
"""

from __future__ import annotations

import errno
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tunelab.common.admission import RequestGate
from tunelab.common.auth import ServerAuth, split_host_port
from tunelab.common.capacity import CapacityInterceptor, Limits
from tunelab.common.keepalive import DEFAULT_KEEPALIVE, Keepalive

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # a spec, a run spec: kilobytes; 4 MiB is gRPC's own default
MAX_METADATA_BYTES = 16 * 1024  # a bearer token and a few headers
QUEUED_CALLS_FACTOR = 2
DEFAULT_LIMITS = Limits()

# Same-port sharing would let a second daemon silently steal calls (grpc#19773): off.
SERVER_OPTIONS: Sequence[tuple[str, int]] = (
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
)


class BindError(RuntimeError):
    """The listen address could not be bound (not an address of this host): exit 3."""

    exit_code = 3


class AddressInUse(BindError):
    """Something already listens on the address: exit 2 (stop it, or choose another port)."""

    exit_code = 2


def bind_error(what: str, listen: str, exc: OSError) -> BindError:
    """The one line for a failed bind of ``listen`` (``what``: "listen on", "serve metrics on")."""
    if exc.errno == errno.EADDRINUSE:
        return AddressInUse(
            f"cannot {what} {listen}: address in use (another process listens there; "
            "stop it or choose another port)"
        )
    return BindError(f"cannot {what} {listen}: {exc.strerror or exc}")


def check_free(listen: str) -> None:
    """Raise AddressInUse when ``listen`` (``host:port``) is taken, before gRPC tries it: gRPC's
    C core reports a failed bind as a log line of its own and a bare port number 0 (issue 36.6).
    Anything else about the address is left for gRPC to find."""
    try:
        host, port = split_host_port(listen)
        found = socket.getaddrinfo(host or None, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except (ValueError, OSError):
        return
    if port == 0:
        return
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise bind_error("listen on", listen, exc) from None


@dataclass
class Daemon:
    """A started gRPC server with its health servicer and the port it actually bound."""

    server: grpc.Server
    health: health.HealthServicer
    port: int
    services: tuple[str, ...]
    capacity: CapacityInterceptor
    gate: RequestGate

    def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.services):
            self.health.set(name, status)

    def stop(self, grace: float) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait(grace + 1)
        self.gate.shutdown(wait=False, cancel_futures=True)


def start_daemon(
    *,
    listen: str,
    auth: ServerAuth,
    register: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    limits: Limits = DEFAULT_LIMITS,
    reflection_enabled: bool = True,
    stream_hint: str = "close another stream and retry",
    keepalive: Keepalive = DEFAULT_KEEPALIVE,
) -> Daemon:
    """Create, bind and start a server. ``register`` adds the servicers."""
    auth.check_listen(listen)
    capacity = CapacityInterceptor(limits, stream_hint)
    # with client certificates required, the TLS handshake has proven every caller
    gate = RequestGate(limits.threads, limits.admission, all_trusted=auth.mtls)
    server = grpc.server(
        gate,
        interceptors=[*auth.interceptors(), capacity],  # auth first: a refused call costs no slot
        options=[*SERVER_OPTIONS, *keepalive.server_options()],
        maximum_concurrent_rpcs=QUEUED_CALLS_FACTOR * limits.threads,
    )
    register(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = tuple(service_names)
    if reflection_enabled:
        reflection.enable_server_reflection(
            (*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
    creds = auth.credentials()
    check_free(listen)
    try:
        port = server.add_secure_port(listen, creds) if creds else server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise BindError(f"cannot listen on {listen}: {exc}") from exc
    if port == 0:
        raise BindError(f"cannot listen on {listen}: address in use or not available")
    server.start()
    daemon = Daemon(server, health_servicer, port, names, capacity, gate)
    daemon.set_serving(True)
    return daemon


def run_until_signalled(name: str, start: Callable[[], object], close: Callable[[], None]) -> int:
    """Start a daemon, block until SIGTERM or SIGINT, then close it; returns the exit code."""
    stop = threading.Event()
    log = structlog.get_logger(name)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info(f"{name}_stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    start()
    try:
        while not stop.wait(3600):
            pass
    finally:
        close()
        log.info(f"{name}_stopped")
    return 0


def run_daemon_command(prog: str, load: Callable[[], Any], serve: Callable[[Any], int]) -> int:
    """The ``serve`` command of either daemon: load its config, set up logging, run it, and
    turn start-up failures into a message and an exit code (2 bad settings or an address in use,
    3 cannot listen)."""
    from tunelab.common.auth import AuthConfigError
    from tunelab.common.configload import ConfigError
    from tunelab.common.logsetup import configure_logging

    try:
        config = load()
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    redaction = configure_logging(config.log_level)
    redaction.learn_files(getattr(config, "secret_files", lambda: ())())
    try:
        return serve(config)
    except AuthConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except BindError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
