"""Hold GPU memory and keep the GPU busy with bf16 matmuls until SIGTERM (a stand-in load)."""

from __future__ import annotations

import argparse
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=8.0, help="GPU memory to hold")
    parser.add_argument("--idle", action="store_true", help="hold memory only, no kernels")
    args = parser.parse_args()
    import torch

    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    hold = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    print(f"holding {hold.numel() / 2**30:.1f} GiB", flush=True)
    while not stop:
        if args.idle:
            time.sleep(0.1)
            continue
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
