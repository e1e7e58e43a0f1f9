"""Hostile HTTP receivers on loopback (issue 45.4): a real listening socket whose every
connection gets one scripted behaviour (an endless 302, a slowloris answer, a garbage status
line...). Used by the bounded client's tests and benchmarks/hostile_inputs.py."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

Behaviour = Callable[[socket.socket, "Hostile"], None]


class Hostile:
    """``behaviours[i]`` answers connection ``i`` (the last one answers every later one)."""

    def __init__(self, *behaviours: Behaviour) -> None:
        self.behaviours = list(behaviours)
        self.requests: list[bytes] = []  # the request head each connection sent
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            behave = self.behaviours[min(n, len(self.behaviours) - 1)]
            n += 1
            threading.Thread(target=self._one, args=(conn, behave), daemon=True).start()

    def _one(self, conn: socket.socket, behave: Behaviour) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                head += chunk
            self.requests.append(head)
            behave(conn, self)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(5)


@contextlib.contextmanager
def hostile(*behaviours: Behaviour) -> Iterator[Hostile]:
    server = Hostile(*behaviours)
    try:
        yield server
    finally:
        server.close()


def answer(status: int, body: bytes = b"ok", extra: bytes = b"") -> Behaviour:
    def behave(conn: socket.socket, server: Hostile) -> None:
        conn.sendall(
            b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n%s\r\n" % (status, len(body), extra) + body
        )

    return behave


def endless(status: int = 302, location: bytes = b"/") -> Behaviour:
    """A status, then a body that never ends (no Content-Length; 64 KiB writes until closed)."""

    def behave(conn: socket.socket, server: Hostile) -> None:
        conn.sendall(b"HTTP/1.1 %d Found\r\nLocation: %s\r\n\r\n" % (status, location))
        block = b"x" * 65536
        while not server.stop.is_set():
            conn.sendall(block)

    return behave


def slowloris(every: float = 0.05) -> Behaviour:
    """A valid answer sent one byte at a time, forever (a per-read timeout never fires)."""

    def behave(conn: socket.socket, server: Hostile) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while not server.stop.is_set():
            conn.sendall(b"X-Slow: y\r\n"[:1])
            time.sleep(every)

    return behave


def garbage(line: bytes = b"\x1b]52;c;cHduZWQ=\x07 BANANA\r\n\r\n") -> Behaviour:
    def behave(conn: socket.socket, server: Hostile) -> None:
        conn.sendall(line)

    return behave
