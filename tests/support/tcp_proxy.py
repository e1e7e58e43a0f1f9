"""A loopback TCP forwarder that a test can cut and restore, to make a real agent unreachable
for the controller while the agent (and its run) keeps going."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, upstream_port: int, listen_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = listen_port
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._open()

    def _open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and break the open ones."""
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the thread blocked in accept()
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def drop(self) -> None:
        """Break the open connections but keep accepting new ones (a dropped answer)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        if self._listener is None:
            self._open()

    def close(self) -> None:
        self.cut()
