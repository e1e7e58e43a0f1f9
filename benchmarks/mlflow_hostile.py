"""The controller's peak memory against a hostile MLflow tracking server (issue 36.3).

A real ``tunelab controller serve`` exports to a local HTTP server that answers every request
with ``Content-Length: 4000000000`` and a body that never ends (or, ``--mode endless``, no
length and an endless body). The controller's RSS is sampled every 0.1 s for ``--seconds``;
the table gives its RSS at start, its peak, the requests the server saw and the bytes it
managed to send. A run is stopped early when RSS passes ``--kill-mib`` (the old controller
grew by gigabytes).

    python benchmarks/mlflow_hostile.py [--seconds 20] [--mode declared|endless] [--repo DIR]

``--repo`` runs another checkout's controller (its ``controller``, ``proto`` and ``agent``
folders first on PYTHONPATH), so the same script measures before and after a change.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent.parent
CHUNK = b"x" * (256 << 10)


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "declared"
    requests_seen = 0
    sent = 0

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        type(self).requests_seen += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.mode == "declared":
            self.send_header("Content-Length", "4000000000")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        try:
            while True:
                self.wfile.write(CHUNK)
                type(self).sent += len(CHUNK)
        except OSError:
            self.close_connection = True

    do_GET = do_POST = _answer


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mode", choices=("declared", "endless"), default="declared")
    parser.add_argument("--repo", default="")
    parser.add_argument("--kill-mib", type=float, default=1500.0)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    Hostile.mode = args.mode
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        **os.environ,
        "TUNELAB_CONTROLLER_MLFLOW_TRACKING_URI": f"http://127.0.0.1:{server.server_address[1]}",
        "TUNELAB_CONTROLLER_MLFLOW_INTERVAL": "1s",
    }
    if args.repo:
        repo = Path(args.repo)
        paths = [str(repo / p) for p in ("controller", "proto", "agent")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="tunelab-mlflow-hostile-") as folder:
        command = [sys.executable, "-m", "tunelab.cli", "controller", "serve",
                   "--listen", f"127.0.0.1:{free_port()}", "--db", f"{folder}/c.db"]  # fmt: skip
        log = Path(folder) / "controller.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        watched = psutil.Process(proc.pid)
        started = time.monotonic()
        first = peak = 0.0
        stopped = ""
        while time.monotonic() - started < args.seconds and proc.poll() is None:
            rss = watched.memory_info().rss / 2**20
            first = first or rss
            peak = max(peak, rss)
            if peak > args.kill_mib:
                stopped = f"stopped at {time.monotonic() - started:.1f} s"
                break
            time.sleep(0.1)
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        failures = log.read_text(errors="replace").count("mlflow_export_failed")
    server.shutdown()
    print(f"{'code':<10} {'mode':<9} {'seconds':>7} {'RSS start MiB':>14} {'RSS peak MiB':>13} "
          f"{'requests':>8} {'MiB sent':>9} {'failures logged':>15}  note")  # fmt: skip
    print(f"{args.label or args.repo or 'this':<10} {args.mode:<9} {args.seconds:>7.0f} "
          f"{first:>14.0f} {peak:>13.0f} {Hostile.requests_seen:>8} "
          f"{Hostile.sent / 2**20:>9.0f} {failures:>15}  {stopped}")  # fmt: skip


if __name__ == "__main__":
    main()
