"""One keepalive policy for both ends of every tunelab channel.

Clients ping during a call every 30 s, so a dead agent or controller is noticed within a minute,
not at the next TCP timeout. Servers accept pings down to every 20 s. The server's floor must
stay below the client's period: gRPC core answers pings that come faster than its floor (5 min by
default) with GOAWAY ``too_many_pings`` after two strikes, which ended a quiet ``logs -f`` or a
watch after about two minutes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keepalive:
    ping_ms: int = 30_000  # a client pings a call that has carried no data for this long
    timeout_ms: int = 10_000  # an unanswered ping closes the connection after this long
    min_recv_ms: int = 20_000  # a server accepts pings no more often than this

    def __post_init__(self) -> None:
        if not 0 < self.min_recv_ms < self.ping_ms:
            raise ValueError("keepalive: the server's floor must be below the client's period")

    def client_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.keepalive_time_ms", self.ping_ms),
            ("grpc.keepalive_timeout_ms", self.timeout_ms),
            # by default core sends two pings on a call without data, then one a minute: a
            # dead peer under a quiet watch went unnoticed for minutes
            ("grpc.http2.max_pings_without_data", 0),
        ]

    def server_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.keepalive_permit_without_calls", 1),
            # core's name for GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS; an unknown
            # option name is ignored without a word, which is how the default crept back in
            ("grpc.http2.min_ping_interval_without_data_ms", self.min_recv_ms),
        ]


DEFAULT_KEEPALIVE = Keepalive()
