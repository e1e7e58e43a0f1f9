"""A stand-in inference server with fault knobs, for the lifecycle tests (stdlib only).

It prints tqdm-style shard loading lines, then answers GET on its port. Knobs:
  --load-seconds S --shards N   load time and shard count printed as progress
  --health-status CODE          status of the ready path once loaded (body always empty)
  --not-ready-status CODE       status before it is loaded (default 503; 0 = do not listen yet)
  --crash-at-shard K --exit-code C   exit mid-load
  --die-after-ready S           exit with --exit-code S seconds after becoming ready
  --ignore-sigterm              keep running on SIGTERM
  --grandchild                  fork a grandchild into its own session that also ignores SIGTERM
  --escape MODE                 double-fork a grandchild that ignores SIGTERM and leaves the tree:
                                setsid-env-i (``setsid env -i python ...``, no environment at all)
                                or unset-marker (own session, TUNELAB_SERVER_ID removed)
  --worker                      fork a child in its own session that ignores SIGTERM (the leader
                                itself exits on SIGTERM: the stop lasts the whole grace, and the
                                leader's pid is free for the kernel to hand out meanwhile)
  --ready-file PATH             write the wall-clock time of the first 2xx it sends
  --ready-since-file PATH       write the wall-clock time it became ready (could answer 2xx)
  --model ID                    served by /v1/models
  --listen-port P               listen on P instead of --port, and say so as uvicorn does (a
                                server whose own config names another port than the probed one)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--load-seconds", type=float, default=0.5)
    p.add_argument("--shards", type=int, default=5)
    p.add_argument("--health-status", type=int, default=200)
    p.add_argument("--not-ready-status", type=int, default=503)
    p.add_argument("--crash-at-shard", type=int, default=-1)
    p.add_argument("--exit-code", type=int, default=3)
    p.add_argument("--die-after-ready", type=float, default=-1)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--grandchild", action="store_true")
    p.add_argument("--escape", choices=["setsid-env-i", "unset-marker"])
    p.add_argument("--worker", action="store_true")
    p.add_argument("--ready-file")
    p.add_argument(
        "--ready-since-file", help="write the wall-clock time it became able to answer 2xx"
    )
    p.add_argument("--model", default="fake-model")
    p.add_argument("--listen-port", type=int, default=0)
    p.add_argument("--sleep-forever", action="store_true", help="grandchild mode")
    args = p.parse_args()
    exit_code: int = args.exit_code

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.sleep_forever:
        while True:
            time.sleep(3600)
    if args.grandchild:
        # An intermediate child starts the grandchild in a session of its own and exits at once:
        # the grandchild leaves both the process group and the process tree (reparented to init).
        code = (
            "import os,signal,time;signal.signal(signal.SIGTERM,signal.SIG_IGN);"
            "print('grandchild', os.getpid(), flush=True);time.sleep(100000)"
        )
        intermediate = (
            "import subprocess,sys;"
            f"subprocess.Popen([sys.executable,'-c',{code!r}],start_new_session=True)"
        )
        subprocess.run([sys.executable, "-c", intermediate], check=True)

    if args.escape:
        _escape(args.escape)
    if args.worker:
        code = (
            "import os,signal,time;signal.signal(signal.SIGTERM,signal.SIG_IGN);"
            "print('worker', os.getpid(), flush=True);time.sleep(100000)"
        )
        subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    state: dict[str, bool | float | None] = {"ready": False, "first_2xx": None}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                status = 200 if state["ready"] else args.not_ready_status
                body = json.dumps(
                    {"object": "list", "data": [{"id": args.model, "object": "model"}]}
                ).encode()
            else:
                status = args.health_status if state["ready"] else args.not_ready_status
                body = b""
            if 200 <= status < 300 and self.path != "/v1/models":
                with lock:
                    if state["first_2xx"] is None:
                        state["first_2xx"] = time.time()
                        if args.ready_file:
                            with open(args.ready_file, "w") as f:
                                f.write(repr(state["first_2xx"]))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = None
    port = args.listen_port or args.port
    if args.not_ready_status:
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"fake server pid {os.getpid()} port {args.port}", flush=True)
    start = time.time()
    for shard in range(1, args.shards + 1):
        time.sleep(args.load_seconds / max(args.shards, 1))
        if shard == args.crash_at_shard:
            print(f"RuntimeError: shard {shard} is corrupt", flush=True)
            return exit_code
        elapsed = time.time() - start
        rate = shard / elapsed if elapsed else 0.0
        pct = int(100 * shard / args.shards)
        remaining = (args.shards - shard) / rate if rate else 0
        spent = f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}"
        left = f"{int(remaining) // 60:02d}:{int(remaining) % 60:02d}"
        sys.stdout.write(
            f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {shard}/{args.shards} "
            f"[{spent}<{left}, {rate:5.2f}it/s]\r"
        )
        sys.stdout.flush()
    print("\nmodel loaded", flush=True)
    if server is None:
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    if args.listen_port:
        print(f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C)", flush=True)
    state["ready"] = True
    if args.ready_since_file:
        with open(args.ready_since_file, "w") as f:
            f.write(repr(time.time()))
    if args.die_after_ready >= 0:
        time.sleep(args.die_after_ready)
        print("fatal: CUDA error: an illegal memory access was encountered", flush=True)
        return exit_code
    while True:
        time.sleep(3600)


def _escape(mode: str) -> None:
    """An intermediate process starts the grandchild and exits at once, so the grandchild is
    reparented (to the nearest subreaper, else init) and carries no trace of the server."""
    code = (
        "import os,signal,time;signal.signal(signal.SIGTERM,signal.SIG_IGN);"
        "print('escaped', os.getpid(), flush=True);time.sleep(100000)"
    )
    if mode == "setsid-env-i":
        argv = ["setsid", "env", "-i", sys.executable, "-c", code]
        launch = f"import subprocess;subprocess.Popen({argv!r})"
    else:
        launch = (
            "import os,subprocess,sys;env=dict(os.environ);env.pop('TUNELAB_SERVER_ID',None);"
            f"subprocess.Popen([sys.executable,'-c',{code!r}],env=env,start_new_session=True)"
        )
    subprocess.run([sys.executable, "-c", launch], check=True)


if __name__ == "__main__":
    sys.exit(main())
