"""Authentication on both ends of a tunelab gRPC connection.

Server side: a bearer-token interceptor (every RPC except ``grpc.health.v1.Health/Check``: with a
token configured, health ``Watch`` needs it too), TLS/mTLS credentials, and the rule that a daemon
only listens beyond loopback when a token or client certificates guard it. The interceptor runs
when a call's headers arrive; a refused call is answered from there by the admission gate
(``admission.py``) without a thread waiting for its message, and an accepted one is marked
``Trusted`` so the gate never caps it.
Client side: channels that carry the token and TLS settings.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tunelab.common.admission import REPORT_RUN, Refusal, Trusted
from tunelab.common.capacity import HEALTH_CHECK, with_behavior
from tunelab.common.keepalive import DEFAULT_KEEPALIVE, Keepalive

AUTH_HEADER = "authorization"
# ReportRun carries its own per-attempt token, checked by the controller against the attempt;
# unproven at the header stage, it waits for its message in slots of its own (admission.py).
UNAUTHENTICATED_METHODS = frozenset({HEALTH_CHECK, REPORT_RUN})


def bearer(token: str) -> tuple[str, str]:
    """The metadata entry that carries a token: what clients send and the server expects."""
    return (AUTH_HEADER, f"Bearer {token}")


class AuthConfigError(ValueError):
    """Auth settings that cannot be used (unreadable file, exposed listener without auth)."""


def read_token(path: Path | str | None) -> str | None:
    """The token in ``path`` (surrounding whitespace dropped); None when no path is given."""
    if path is None or str(path) == "":
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise AuthConfigError(f"token file {path}: {exc.strerror}") from exc
    if not token:
        raise AuthConfigError(f"token file {path} is empty")
    return token


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port); raises ValueError naming the problem."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"expected a numeric port in {address!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} out of range 0-65535 in {address!r}")
    return host, port


def is_loopback(host: str) -> bool:
    """True when ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


@dataclass(frozen=True)
class ServerAuth:
    """How a daemon authenticates callers."""

    token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None

    @classmethod
    def from_files(
        cls,
        token_file: Path | None,
        tls_cert: Path | None,
        tls_key: Path | None,
        tls_client_ca: Path | None,
    ) -> ServerAuth:
        """A daemon's auth from its configured files (the token is read now)."""
        return cls(read_token(token_file), tls_cert, tls_key, tls_client_ca)

    @property
    def mtls(self) -> bool:
        return self.tls_client_ca is not None

    def check_listen(self, listen: str) -> None:
        """Refuse a non-loopback listener that neither a token nor mTLS protects."""
        host, _ = split_host_port(listen)
        if not is_loopback(host) and self.token is None and not self.mtls:
            raise AuthConfigError(
                f"refusing to listen on {listen}: not loopback, and neither --token-file nor "
                "--tls-client-ca is configured (anyone who can reach it could start processes)"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise AuthConfigError("--tls-cert and --tls-key must be given together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise AuthConfigError("--tls-client-ca needs --tls-cert and --tls-key")

    def credentials(self) -> grpc.ServerCredentials | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        try:
            key = self.tls_key.read_bytes()
            cert = self.tls_cert.read_bytes()
            ca = self.tls_client_ca.read_bytes() if self.tls_client_ca else None
        except OSError as exc:
            raise AuthConfigError(f"TLS file {exc.filename}: {exc.strerror}") from exc
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
        )

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        return [TokenAuthInterceptor(self.token)] if self.token else []


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Rejects every call without ``authorization: Bearer <token>`` (health Check excepted)."""

    def __init__(self, token: str) -> None:
        self._expected = bearer(token)[1].encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler_call_details.method in UNAUTHENTICATED_METHODS:
            return continuation(handler_call_details)
        sent = dict(handler_call_details.invocation_metadata or ()).get(AUTH_HEADER)
        if sent is not None and hmac.compare_digest(str(sent).encode(), self._expected):
            handler = continuation(handler_call_details)
            return None if handler is None else _trusted(handler)
        message = "missing bearer token" if sent is None else "invalid bearer token"
        handler = continuation(handler_call_details)
        return _deny(handler, message)


def _trusted(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    inner = (
        handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    )
    if inner is None:
        return handler
    return with_behavior(handler, Trusted(inner))


def _deny(
    handler: grpc.RpcMethodHandler[Any, Any] | None, message: str
) -> grpc.RpcMethodHandler[Any, Any]:
    abort = Refusal(grpc.StatusCode.UNAUTHENTICATED, message)
    if handler is not None and handler.response_streaming:
        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(abort)
        return grpc.unary_stream_rpc_method_handler(abort)
    if handler is not None and handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)


# --- client side ----------------------------------------------------------------------------


class _BearerToken(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the bearer token to every call (works on plaintext loopback channels too)."""

    def __init__(self, token: str) -> None:
        self._header = bearer(token)

    def _details(self, details: Any) -> Any:
        metadata = list(details.metadata or ())
        metadata.append(self._header)
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(
        self, continuation: Any, details: Any, request_iterator: Any
    ) -> Any:
        return continuation(self._details(details), request_iterator)


@dataclass(frozen=True)
class _CallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


@dataclass(frozen=True)
class ClientAuth:
    """What a client needs to reach a daemon: token and/or TLS material."""

    token: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_server_name: str | None = None

    @classmethod
    def from_options(
        cls,
        token_file: str | None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ClientAuth:
        """Token from ``--token-file``, else ``TUNELAB_TOKEN``; TLS paths as given."""
        environ = os.environ if env is None else env
        token = read_token(token_file) if token_file else (environ.get("TUNELAB_TOKEN") or None)
        return cls(
            token=token,
            tls_ca=Path(tls_ca) if tls_ca else None,
            tls_cert=Path(tls_cert) if tls_cert else None,
            tls_key=Path(tls_key) if tls_key else None,
        )

    @property
    def tls(self) -> bool:
        return self.tls_ca is not None or self.tls_cert is not None

    def channel_options(self, keepalive: Keepalive = DEFAULT_KEEPALIVE) -> list[tuple[str, Any]]:
        options: list[tuple[str, Any]] = [
            *keepalive.client_options(),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            # an agent back from a restart is seen within seconds, not after a 2-minute backoff;
            # core reads grpc.min_reconnect_backoff_ms as the connect timeout: it stays at its
            # 20 s (at 250 ms, 200 connections opened at once under load failed their handshake)
            ("grpc.initial_reconnect_backoff_ms", 250),
            ("grpc.max_reconnect_backoff_ms", 3000),
        ]
        if self.tls_server_name:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        return options

    def _credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        try:
            return grpc.ssl_channel_credentials(
                root_certificates=self.tls_ca.read_bytes() if self.tls_ca else None,
                private_key=self.tls_key.read_bytes() if self.tls_key else None,
                certificate_chain=self.tls_cert.read_bytes() if self.tls_cert else None,
            )
        except OSError as exc:
            raise AuthConfigError(f"TLS file {exc.filename}: {exc.strerror}") from exc

    def channel(self, address: str, keepalive: Keepalive = DEFAULT_KEEPALIVE) -> grpc.Channel:
        options = self.channel_options(keepalive)
        creds = self._credentials()
        if creds is not None:
            channel = grpc.secure_channel(address, creds, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.token:
            channel = grpc.intercept_channel(channel, _BearerToken(self.token))
        return channel

    def aio_channel(
        self, address: str, keepalive: Keepalive = DEFAULT_KEEPALIVE
    ) -> grpc.aio.Channel:
        """The same channel for asyncio callers; they send ``call_metadata()`` with each call
        (an aio channel takes no sync interceptor)."""
        options = self.channel_options(keepalive)
        creds = self._credentials()
        if creds is not None:
            return grpc.aio.secure_channel(address, creds, options=options)
        return grpc.aio.insecure_channel(address, options=options)

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        return (bearer(self.token),) if self.token else ()
