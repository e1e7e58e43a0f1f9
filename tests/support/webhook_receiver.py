"""A webhook receiver: a real HTTP server on loopback that records what it is POSTed."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """A real HTTP server on loopback; ``plan`` says what each request gets, in order (a status,
    or "hang": read the body, never answer until the test ends)."""

    def __init__(self, plan: list[int | str], path: str) -> None:
        self.plan = list(plan)
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append(json.loads(body))
                receiver.paths.append(self.path)
                answer = receiver.plan.pop(0) if receiver.plan else 200
                if answer == "hang":
                    receiver.release.wait(30)
                    return
                self.send_response(int(answer))
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def wait_requests(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.bodies) >= count, self.bodies

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
