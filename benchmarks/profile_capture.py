"""Capture a small real torch.profiler trace (GEMMs + attention) and what key_averages() says of it.

Run where torch is installed (not a tunelab dependency)::

    python benchmarks/profile_capture.py --device cpu  --out tests/fixtures/profiles/cpu_torch
    python benchmarks/profile_capture.py --device cuda --out tests/fixtures/profiles/cuda_h200

Writes ``trace.json.gz`` (export_chrome_trace, gzipped) and ``key_averages.json`` (per name:
calls, self CPU us, self device us), then prints a table of tunelab's summary beside
key_averages for the same trace. Each decode step is wrapped in ``record_function
("execute_model")``, the marker vLLM uses, so the summary's step section has something to find.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def workload(device: str, steps: int, attention: str = "default") -> tuple[Any, Any]:
    import torch

    functional = torch.nn.functional
    profiler = torch.profiler

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    hidden, heads, seq, batch = (4096, 32, 1024, 8) if device == "cuda" else (256, 4, 64, 2)
    w_qkv = torch.randn(hidden, 3 * hidden, device=device, dtype=dtype) / hidden**0.5
    w_out = torch.randn(hidden, hidden, device=device, dtype=dtype) / hidden**0.5
    w_up = torch.randn(hidden, 4 * hidden, device=device, dtype=dtype) / hidden**0.5
    w_down = torch.randn(4 * hidden, hidden, device=device, dtype=dtype) / hidden**0.5
    x = torch.randn(batch, seq, hidden, device=device, dtype=dtype)

    def layer(h: Any) -> Any:
        q, k, v = (h @ w_qkv).split(hidden, dim=-1)
        shape = (batch, seq, heads, hidden // heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        if attention == "math":  # the variant of a diff: attention changes, the GEMMs do not
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                a = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + a.transpose(1, 2).reshape(batch, seq, hidden) @ w_out
        h = functional.rms_norm(h, (hidden,))
        return h + functional.silu(h @ w_up) @ w_down

    for _ in range(3):  # warm-up: cuBLAS/cuDNN pick their kernels outside the trace
        layer(x)
    if device == "cuda":
        torch.cuda.synchronize()
    activities = [profiler.ProfilerActivity.CPU] + (
        [profiler.ProfilerActivity.CUDA] if device == "cuda" else []
    )
    with profiler.profile(activities=activities) as prof:
        h = x
        for _ in range(steps):
            with profiler.record_function("execute_model"):
                h = layer(h)
                if device == "cuda":
                    time.sleep(0.002)  # a CPU-side gap, as a server's scheduler makes
        if device == "cuda":
            torch.cuda.synchronize()
    return prof, torch


def key_averages(prof: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for row in prof.key_averages():
        device_us: Any = getattr(row, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(row, "self_cuda_time_total", 0.0)
        out[row.key] = {
            "calls": row.count,
            "self_cpu_us": float(row.self_cpu_time_total),
            "self_device_us": float(device_us),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--attention", choices=["default", "math"], default="default", help="SDPA backend"
    )
    args = parser.parse_args(argv)
    prof, torch = workload(args.device, args.steps, args.attention)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(args.out / "trace.json.gz", "wb", 9) as dst:
            shutil.copyfileobj(src, dst)
    averages = key_averages(prof)
    meta = {
        "torch": torch.__version__,
        "device": args.device,
        "steps": args.steps,
        "attention": args.attention,
    }
    if args.device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(0)
    (args.out / "key_averages.json").write_text(
        json.dumps({"meta": meta, "rows": averages}, indent=1, sort_keys=True) + "\n"
    )
    size = (args.out / "trace.json.gz").stat().st_size
    print(f"wrote {args.out}/trace.json.gz ({size} bytes), key_averages.json; {meta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
