"""A stand-in engine that replays a captured engine log (tests/fixtures/engines) and behaves like
that engine around it (stdlib only). Knobs:
  --replay FILE --seconds S   print FILE's bytes over S seconds (tqdm's \\r redraws kept)
  --listen early|late         early: port open from the start, 503 until ready (SGLang);
                              late: port opens only when ready (vLLM)
  --exit-code C               exit with C after the replay instead of becoming ready
  --shm NAME                  create /dev/shm/NAME, map it and keep it (a psm_* ring buffer)
  --unix-socket PATH          bind a unix socket file there and never unlink it (vLLM's ZeroMQ ipc)
  --requests-file PATH        at ready, write the HTTP requests that came before it and the time
"""

from __future__ import annotations

import argparse
import mmap
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--replay", required=True)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--listen", choices=("early", "late"), default="late")
    p.add_argument("--exit-code", type=int, default=-1)
    p.add_argument("--shm", default="")
    p.add_argument("--unix-socket", default="")
    p.add_argument("--requests-file", default="")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # like a crash: no cleanup at all

    keep: list[object] = []
    if args.shm:
        fd = os.open(f"/dev/shm/{args.shm}", os.O_CREAT | os.O_RDWR, 0o600)
        os.ftruncate(fd, 4096)
        keep.append(mmap.mmap(fd, 4096))
        os.close(fd)
    if args.unix_socket:
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(args.unix_socket)
        unix.listen(1)
        keep.append(unix)

    state = {"ready": False, "before_ready": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                if not state["ready"]:
                    state["before_ready"] += 1

                ready = state["ready"]
            self.send_response(200 if ready else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def serve() -> None:
        httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()

    if args.listen == "early":
        serve()
    data = Path(args.replay).read_bytes()
    pieces = data.rstrip(b"\n").split(b"\n")
    step = args.seconds / max(1, len(pieces))
    for piece in pieces:  # the last line (an engine's ready line) is followed by ready at once
        time.sleep(step)
        sys.stdout.buffer.write(piece + b"\n")
        sys.stdout.flush()
    exit_code: int = args.exit_code
    if exit_code >= 0:
        return exit_code
    if args.listen == "late":
        serve()
    with lock:
        state["ready"] = True
        before = state["before_ready"]
    if args.requests_file:
        Path(args.requests_file).write_text(f"{before} {time.time()}")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
