"""Free loopback ports for tests and benchmarks.

A port is chosen below the kernel's ephemeral range (``ip_local_port_range``), never from it:
between this choice and the daemon's bind, a ``bind(0)`` elsewhere (the benchmark's 200 fake
agents) or an outgoing connection's source port could otherwise take the very same number, and
the daemon would fail with "Address already in use". No port is handed out twice per process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10_000
_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    top = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(LOWEST, top) if top > LOWEST + 1000 else 0
        if port == 0:
            break  # no room below the ephemeral range on this host
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    _given.add(port)
    return port
