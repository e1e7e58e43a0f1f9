"""A stand-in inference server for the GPU stop capture: holds GPU memory (optionally in worker
child processes, like tensor-parallel ranks), keeps the GPU busy, and answers GET /health."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def hold(gib: float, busy: bool, cpu: bool = False) -> None:
    if cpu:  # dry run on a host without a GPU: the same process tree, memory in host RAM
        block = bytearray(int(gib * 2**30))
        print(f"holding {gib:g} GiB of host memory ({len(block)} bytes)", flush=True)
        while True:
            time.sleep(0.1)
    import torch

    block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    print(f"holding {gib:g} GiB on the GPU", flush=True)
    while True:
        if busy:
            for _ in range(10):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        else:
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--gib", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=0, help="child processes holding memory too")
    parser.add_argument("--worker-gib", type=float, default=4.0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="hold host memory, no GPU (dry run)")
    parser.add_argument(
        "--escape-workers",
        action="store_true",
        help="start workers through setsid env -i and an intermediate that exits: they leave "
        "the server's session, tree and environment",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.worker:
        hold(args.gib, busy=not args.cpu, cpu=args.cpu)
        return 0
    for _ in range(args.workers):
        command = [sys.executable, __file__, "--worker", "--gib", str(args.worker_gib)]
        if args.ignore_sigterm:
            command.append("--ignore-sigterm")
        if args.cpu:
            command.append("--cpu")
        if args.escape_workers:
            escaped = ["setsid", "env", "-i", *command]
            launch = f"import subprocess;subprocess.Popen({escaped!r})"
            subprocess.run([sys.executable, "-c", launch], check=True)
        else:
            subprocess.Popen(command)

    class Health(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    ready = threading.Event()

    def serve() -> None:
        ready.wait()
        ThreadingHTTPServer(("127.0.0.1", args.port), Health).serve_forever()

    threading.Thread(target=serve, daemon=True).start()
    if args.cpu:
        threading.Timer(0.5, ready.set).start()
        hold(args.gib, busy=False, cpu=True)
        return 0
    import torch

    torch.cuda.init()
    threading.Timer(0.5, ready.set).start()  # answer once the allocation below is done
    hold(args.gib, busy=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
