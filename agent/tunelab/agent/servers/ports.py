"""Ports for servers: whether one is taken, and the auto ports a run's server gets.

An auto port is never taken from the ephemeral range (``net.ipv4.ip_local_port_range``): the
kernel hands those to outgoing connections, which can take a port between the moment the agent
chose it and the moment the server binds it (``bind(0)`` picks from exactly there). Auto ports
come from a window below that range instead, skip ``net.ipv4.ip_local_reserved_ports``, and are
never handed out twice while held: a port stays held until its holder releases it.
"""

from __future__ import annotations

import errno
import secrets
import socket
import threading
from collections.abc import Callable

from tunelab.agent.errors import Unavailable
from tunelab.agent.system import System

PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED_PORTS = "/proc/sys/net/ipv4/ip_local_reserved_ports"
DEFAULT_EPHEMERAL_LOW = 32768  # the kernel's default when the file cannot be read
WINDOW_LOW = 20000  # auto ports start here (below: well-known services such as :8000, :9090)
MIN_WINDOW_LOW = 1024  # never a privileged port, however low the ephemeral range starts


def port_in_use(port: int) -> bool:
    """True when something listens on ``port`` (any IPv4 address) or accepts on loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    try:
        sock6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:  # no IPv6 on this host: the IPv4 answer stands
        return False
    with sock6:
        sock6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock6.bind(("::", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def ephemeral_low(system: System) -> int:
    """The first port of the ephemeral range."""
    line = system.read_line(PORT_RANGE) or ""
    try:
        return int(line.split()[0])
    except (IndexError, ValueError):
        return DEFAULT_EPHEMERAL_LOW


def reserved_ports(system: System) -> set[int]:
    """``ip_local_reserved_ports``: ``8080,9148,20000-20010`` (empty when none)."""
    found: set[int] = set()
    for part in (system.read_line(RESERVED_PORTS) or "").split(","):
        low, _, high = part.strip().partition("-")
        try:
            first = int(low)
            found.update(range(first, int(high or first) + 1))
        except ValueError:
            continue
    return found


class PortPool:
    """Auto ports below the ephemeral range; each held by one holder (a run id) until released.

    The kernel settings are read at every :meth:`take` (an operator may change them while the
    agent runs). Candidates are tried in turn from just past the last port handed out, so a
    port released a moment ago (its server's sockets may linger in TIME_WAIT) comes last. The
    first take starts at a random place in the window (``start``: an offset, for tests), so
    two agents on one host (tests, or one per GPU set) do not both begin with the same port
    before either server has bound it.
    """

    def __init__(
        self,
        system: System | None = None,
        in_use: Callable[[int], bool] = port_in_use,
        start: int | None = None,
    ) -> None:
        self._system = system or System("/")
        self._in_use = in_use
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._last = 0
        self._start = start

    def window(self) -> range:
        high = ephemeral_low(self._system)  # exclusive
        low = WINDOW_LOW if high > WINDOW_LOW else MIN_WINDOW_LOW
        return range(low, max(low, high))

    def take(self, holder: str, exclude: set[int] | frozenset[int] = frozenset()) -> int:
        """A free port for ``holder`` (the one it holds already, if any); ``exclude``: ports
        known to be taken otherwise (live servers). Unavailable when the window is full."""
        with self._lock:
            if holder in self._held:
                return self._held[holder]
            window = self.window()
            skip = reserved_ports(self._system) | set(self._held.values()) | set(exclude)
            if self._last in window:
                start = self._last + 1
            else:
                offset = secrets.randbelow(len(window) or 1) if self._start is None else self._start
                start = window.start + offset % max(1, len(window))
            ordered: list[int] = [*range(start, window.stop), *range(window.start, start)]
            for port in ordered:
                if port in skip or self._in_use(port):
                    continue
                self._held[holder] = self._last = port
                return port
        raise Unavailable(
            f"no free auto port in {window.start}-{window.stop - 1} (below "
            f"{PORT_RANGE}, outside {RESERVED_PORTS}); give the server an explicit port"
        )

    def hold(self, holder: str, port: int) -> None:
        """Record a port handed out before an agent restart (a resumed run's)."""
        with self._lock:
            self._held[holder] = port

    def release(self, holder: str) -> None:
        with self._lock:
            self._held.pop(holder, None)

    def held(self) -> dict[str, int]:
        with self._lock:
            return dict(self._held)
