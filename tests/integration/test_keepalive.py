"""Integration: a call that carries no data for a long time (``logs -f`` on a quiet server, a
watch on a server that is still loading) outlives many client keepalive pings. The periods are
scaled down (1 s pings, 0.5 s floor) so the test takes seconds; the policy is the one both
daemons and every client use (tunelab.common.keepalive)."""

from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.ports import free_port
from tunelab.common.auth import ClientAuth, ServerAuth
from tunelab.common.keepalive import DEFAULT_KEEPALIVE, Keepalive
from tunelab.common.serving import SERVER_OPTIONS, start_daemon

FAST = Keepalive(ping_ms=1000, timeout_ms=1000, min_recv_ms=500)


def test_an_idle_stream_survives_many_keepalive_pings() -> None:
    daemon = start_daemon(
        listen=f"127.0.0.1:{free_port()}",
        auth=ServerAuth(),
        register=lambda server: None,
        service_names=[],
        keepalive=FAST,
    )
    channel = ClientAuth().channel(f"127.0.0.1:{daemon.port}", keepalive=FAST)
    failures: list[grpc.RpcError] = []
    try:
        # Health.Watch sends the status once, then only on a change: an idle stream
        stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        assert next(stream).status == health_pb2.HealthCheckResponse.SERVING

        def drain() -> None:
            try:
                for _ in stream:
                    pass
            except grpc.RpcError as exc:
                failures.append(exc)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        time.sleep(8)  # 8 pings; a server on core's 5-minute floor sends GOAWAY after 3
        assert [f.code() for f in failures] == [], [f.details() for f in failures]
        daemon.set_serving(False)  # and the stream still delivers
        reader.join(0.1)
        stream.cancel()
        reader.join(5)
        assert [f.code() for f in failures] == [grpc.StatusCode.CANCELLED]
    finally:
        channel.close()
        daemon.stop(0.5)


def test_every_channel_option_we_pass_is_one_grpc_core_knows() -> None:
    """Core ignores an option name it does not know without a word: check each one against
    the names compiled into the extension that grpcio loads."""
    cygrpc = importlib.import_module("grpc._cython.cygrpc")  # compiled: no stubs name it
    library = Path(str(cygrpc.__file__)).read_bytes()
    names = {name for name, _ in SERVER_OPTIONS}
    names |= {name for name, _ in DEFAULT_KEEPALIVE.server_options()}
    names |= {name for name, _ in ClientAuth(tls_server_name="agent").channel_options()}
    unknown = sorted(name for name in names if name.encode() + b"\0" not in library)
    assert unknown == []


def test_a_server_floor_at_or_above_the_client_period_is_refused() -> None:
    with pytest.raises(ValueError, match="floor"):
        Keepalive(ping_ms=20_000, min_recv_ms=20_000)
