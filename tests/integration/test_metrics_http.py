"""The metrics HTTP server on loopback: bounded connections, threads and time (issue 11)."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunelab.common.httpserve import HttpServer, Limits, Request, Response

LIMITS = Limits(max_connections=8, idle_timeout=0.6, request_timeout=0.4, workers=2)


def handler(request: Request) -> Response:
    if request.path == "/slow":
        time.sleep(1.0)
    return Response(200, f"{request.method} {request.path}\n".encode())


@pytest.fixture
def server() -> Iterator[HttpServer]:
    srv = HttpServer("127.0.0.1", 0, handler, lambda r: r.path == "/slow", LIMITS)
    srv.start()
    try:
        yield srv
    finally:
        srv.close()


def connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def wait_until(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def endpoint_threads(server: HttpServer) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(server.thread_prefix))


def test_keep_alive_head_and_close(server: HttpServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    for _ in range(3):  # one connection, three requests
        conn.request("GET", "/metrics")
        reply = conn.getresponse()
        assert reply.status == 200 and reply.read() == b"GET /metrics\n"
    conn.request("HEAD", "/metrics")
    reply = conn.getresponse()
    assert reply.getheader("Content-Length") == str(len(b"HEAD /metrics\n"))
    assert reply.read() == b""
    conn.request("GET", "/x", headers={"Connection": "close"})
    reply = conn.getresponse()
    assert reply.getheader("Connection") == "close" and reply.read() == b"GET /x\n"
    conn.close()


def test_hundreds_of_idle_connections_hold_no_threads_and_give_way_to_new_ones() -> None:
    limits = Limits(max_connections=8, idle_timeout=60, request_timeout=60, workers=2)
    server = HttpServer("127.0.0.1", 0, handler, limits=limits)  # no idle close mid-test
    server.start()
    try:
        before = endpoint_threads(server)
        held = [connect(server) for _ in range(limits.max_connections)]
        wait_until(lambda: server.stats.open == limits.max_connections)
        extra = [connect(server) for _ in range(200)]
        wait_until(lambda: server.stats.evicted == 200)  # each took an idle one's place
        assert server.stats.open == limits.max_connections and server.stats.rejected == 0
        assert all(read_all(sock) == b"" for sock in held)  # closed, not answered 503
        assert endpoint_threads(server) <= 1 + limits.workers
        assert endpoint_threads(server) == before  # no thread per connection
        for sock in held + extra:
            sock.close()
    finally:
        server.close()


def test_when_every_connection_is_mid_request_a_new_one_is_answered_503() -> None:
    limits = Limits(max_connections=4, idle_timeout=60, request_timeout=60, workers=1)
    server = HttpServer("127.0.0.1", 0, handler, lambda r: r.path == "/slow", limits)
    server.start()
    try:
        busy = [connect(server) for _ in range(limits.max_connections)]
        for sock in busy:
            sock.sendall(b"GET /slow HTTP/1.1\r\nConnection: close\r\n\r\n")
        # every one accepted and mid-request (all() of the first three alone let the fourth
        # wait in the backlog, and the new connection took its slot: a read that timed out)
        wait_until(
            lambda: (
                len(conns := list(server.connections)) == limits.max_connections
                and all(c.busy for c in conns)
            )
        )
        assert read_all(connect(server)).startswith(b"HTTP/1.1 503 ")
        assert all(b"GET /slow" in read_all(sock) for sock in busy)  # all still answered
        for sock in busy:
            sock.close()
    finally:
        server.close()


def connect_from(server: HttpServer, source: str) -> socket.socket:
    """A connection from another loopback address (all of 127.0.0.0/8 is this host)."""
    return socket.create_connection(
        ("127.0.0.1", server.port), timeout=5, source_address=(source, 0)
    )


def scrape_from(server: HttpServer, source: str) -> bytes:
    sock = connect_from(server, source)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    try:
        return read_all(sock)
    finally:
        sock.close()


def test_one_client_holding_idle_connections_never_keeps_a_scrape_out() -> None:
    # issue 23: one client holding 64 idle connections made 76 of 80 real scrapes fail
    limits = Limits(max_connections=8, max_per_client=3, idle_timeout=60, request_timeout=60)
    server = HttpServer("127.0.0.1", 0, handler, limits=limits)
    server.start()
    try:
        hog = [connect_from(server, "127.0.0.2") for _ in range(64)]
        wait_until(lambda: server.stats.evicted == 64 - limits.max_per_client)
        assert len(server.by_client["127.0.0.2"]) == limits.max_per_client
        replies = [scrape_from(server, "127.0.0.3") for _ in range(20)]
        assert all(r.startswith(b"HTTP/1.1 200 ") for r in replies)
        for sock in hog:
            sock.close()
    finally:
        server.close()


def test_many_clients_filling_the_server_with_idle_connections_give_way_to_a_scrape() -> None:
    limits = Limits(max_connections=8, max_per_client=2, idle_timeout=60, request_timeout=60)
    server = HttpServer("127.0.0.1", 0, handler, limits=limits)
    server.start()
    try:
        crowd = [connect_from(server, f"127.0.1.{i}") for i in range(1, 9) for _ in range(2)]
        wait_until(lambda: server.stats.open == limits.max_connections)
        slow = connect_from(server, "127.0.2.1")
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")  # a head still arriving: evicted after idle
        assert scrape_from(server, "127.0.2.2").startswith(b"HTTP/1.1 200 ")
        assert server.stats.rejected == 0
        for sock in [*crowd, slow]:
            sock.close()
    finally:
        server.close()


def test_idle_connections_and_slow_request_heads_are_closed(server: HttpServer) -> None:
    idle = connect(server)
    slow = connect(server)
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    start = time.monotonic()
    assert read_all(slow) == b""  # closed, not answered
    assert LIMITS.request_timeout - 0.05 <= time.monotonic() - start < 3
    assert read_all(idle) == b""
    assert time.monotonic() - start >= LIMITS.idle_timeout - 0.15
    wait_until(lambda: server.stats.open == 0)
    assert server.stats.timed_out == 2


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 9000, b"431"),
        (b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"400"),
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nbad header\r\n\r\n", b"400"),
    ],
)
def test_hostile_requests_are_refused_and_closed(
    server: HttpServer, raw: bytes, status: bytes
) -> None:
    sock = connect(server)
    sock.sendall(raw)
    reply = read_all(sock)
    assert reply.split(b" ")[1] == status
    sock.close()


def test_a_slow_handler_runs_on_the_pool_and_never_delays_the_fast_path(
    server: HttpServer,
) -> None:
    slow = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    slow.request("GET", "/slow")
    time.sleep(0.1)
    start = time.monotonic()
    fast = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    fast.request("GET", "/metrics")
    assert fast.getresponse().read() == b"GET /metrics\n"
    assert time.monotonic() - start < 0.5
    assert slow.getresponse().read() == b"GET /slow\n"
    slow.close()
    fast.close()


def test_pipelined_requests_are_answered_in_order(server: HttpServer) -> None:
    sock = connect(server)
    sock.sendall(
        b"GET /slow HTTP/1.1\r\n\r\nGET /a HTTP/1.1\r\n\r\n"
        b"GET /b HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    reply = read_all(sock)
    assert reply.index(b"GET /slow\n") < reply.index(b"GET /a\n") < reply.index(b"GET /b\n")
    sock.close()


def test_a_client_pipelining_far_ahead_of_its_replies_is_cut_off(server: HttpServer) -> None:
    sock = connect(server)
    sock.sendall(b"GET /slow HTTP/1.1\r\n\r\n")  # keeps the connection busy for 1 s
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(b"GET /a HTTP/1.1\r\n\r\n" * 4000)  # 76 KB unanswered: over the bound
    reply = b""
    with contextlib.suppress(ConnectionResetError):  # closed with bytes in flight: a reset
        reply = read_all(sock)
    assert reply == b"" or b" 431 " in reply
    assert b"GET /a" not in reply  # none of them was answered
    wait_until(lambda: server.stats.open == 0)
    sock.close()


def test_a_bound_port_is_refused_at_construction() -> None:
    first = HttpServer("127.0.0.1", 0, handler)
    try:
        with pytest.raises(OSError):
            HttpServer("127.0.0.1", first.port, handler)
    finally:
        first.close()


def test_the_controllers_metrics_endpoint_is_the_same_bounded_server(tmp_path: Path) -> None:
    # issue 23: 1,000 idle connections to the controller's /metrics were 1,310 threads
    from tests.support.controller_proc import ControllerProcess

    controller = ControllerProcess(tmp_path / "controller").start()
    assert controller.proc is not None
    tasks = Path(f"/proc/{controller.proc.pid}/task")
    try:
        before = len(list(tasks.iterdir()))
        idle = [
            socket.create_connection(("127.0.0.1", controller.metrics_port), timeout=5)
            for _ in range(200)
        ]
        scrape = http.client.HTTPConnection("127.0.0.1", controller.metrics_port, timeout=10)
        scrape.request("GET", "/metrics")
        reply = scrape.getresponse()
        body = reply.read()
        assert reply.status == 200 and b"tunelab_controller_experiments" in body
        assert len(list(tasks.iterdir())) <= before + 5  # the pool's few workers, at most
        scrape.close()
        for sock in idle:
            sock.close()
    finally:
        controller.terminate()
