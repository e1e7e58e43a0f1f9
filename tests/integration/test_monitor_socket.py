"""Integration: a peer trickling bytes into a monitor's socket cannot hold the monitor (issue 23.9).

A real agent starts a real fake server under its monitor; a client of the same uid (allowed by
the socket's peer check) sends one byte of a request line every 0.3 s. On the old monitor each
byte renewed a 1 s timeout, so the trickle held the monitor's loop (StopServer was still
STOPPING after 39.6 s); now a whole request line has one 1 s deadline."""

from __future__ import annotations

import contextlib
import socket
import time

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import fake_spec, start, watch_until
from tunelab.agent.procs.monitor import SOCKET_NAME
from tunelab.v1 import agent_pb2, server_pb2

S = server_pb2


def test_a_trickling_peer_is_cut_off_and_the_server_still_stops(agent: AgentProcess) -> None:
    stub = agent.stub()
    server = start(stub, fake_spec(free_port(), "--load-seconds", "0.1", stop_grace_seconds=1))
    watch_until(stub, server.id, [S.SERVER_STATE_READY])
    [path] = list((agent.state_dir / "servers").glob(f"*{server.id}*/{SOCKET_NAME}")) or list(
        (agent.state_dir / "servers").rglob(SOCKET_NAME)
    )
    trickle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    trickle.connect(str(path))
    payload = b'{"op": "status", "pad": "' + b"x" * 40  # 20 s of trickle at most, no newline
    sent = 0
    cut_off = False
    with contextlib.suppress(OSError):  # a send after the monitor closed: cut off too
        for byte in payload:
            trickle.send(bytes([byte]))
            sent += 1
            time.sleep(0.3)
            trickle.setblocking(False)
            try:
                cut_off = trickle.recv(1) == b""
            except BlockingIOError:
                cut_off = False
            trickle.setblocking(True)
            if cut_off:
                break
    trickle.close()
    assert cut_off or sent < len(payload), "the monitor kept reading a request that never ends"
    stopped = stub.StopServer(agent_pb2.StopServerRequest(id=server.id), timeout=60).server
    assert stopped.state == S.SERVER_STATE_STOPPED
