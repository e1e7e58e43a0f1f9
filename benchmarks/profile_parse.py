"""Parse time and peak memory of tunelab's trace summariser, on a synthetic trace of a given size.

    PYTHONPATH=controller:proto:agent python benchmarks/profile_parse.py --mb 500 [--gzip]
    PYTHONPATH=controller:proto:agent python benchmarks/profile_parse.py --trace FILE

The synthetic trace looks like a server's PyTorch trace: per step, a ``user_annotation`` step,
nested ``cpu_op`` events with ``args`` (shapes, sequence numbers) as torch writes them, a
``cuda_runtime`` launch per kernel, and ``kernel`` events on two streams with their ``args``.
The summary runs in a child process so its peak RSS (``ru_maxrss``) is its own, not the
generator's. Prints one table row: file size, events, parse seconds, MB/s, peak RSS.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

KERNELS = (
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, float, int)",
    "fused_moe_kernel",
)
OPS = (
    "aten::linear",
    "aten::addmm",
    "aten::scaled_dot_product_attention",
    "aten::add",
    "aten::mul",
)


def generate(path: Path, megabytes: int, use_gzip: bool) -> int:
    """Write a trace of about ``megabytes`` MB of JSON text; return its event count."""
    rng = random.Random(0)
    target = megabytes * 1_000_000
    events = 0
    out: IO[str]
    with gzip.open(path, "wt", encoding="utf-8") if use_gzip else path.open("w") as out:
        out.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H200"}],\n')
        out.write('"traceEvents": [\n')
        ts, step, first, written = 1_000_000.0, 0, True, 0
        while written < target:
            step_start = ts
            for k in range(40):
                name = OPS[k % len(OPS)]
                dur = round(rng.uniform(5, 50), 3)
                args = {"External id": events, "Sequence number": events,
                        "Input Dims": [[8, 1024, 4096], [4096, 12288]],
                        "Input type": ["c10::BFloat16", "c10::BFloat16"]}  # fmt: skip
                ev = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                      "ts": round(ts, 3), "dur": dur, "args": args}  # fmt: skip
                launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                          "tid": 1, "ts": round(ts + 1, 3), "dur": 3.0,
                          "args": {"External id": events, "cbid": 211}}  # fmt: skip
                kernel = {"ph": "X", "cat": "kernel", "name": KERNELS[k % len(KERNELS)], "pid": 0,
                          "tid": 7 + (k % 2), "ts": round(ts + 10, 3), "dur": round(dur * 0.8, 3),
                          "args": {"External id": events, "device": 0, "stream": 7 + (k % 2),
                                   "correlation": events, "registers per thread": 168,
                                   "shared memory": 232448, "blocks per SM": 1.0,
                                   "warps per SM": 8.0, "grid": [132, 1, 1], "block": [384, 1, 1],
                                   "est. achieved occupancy %": 12}}  # fmt: skip
                for e in (ev, launch, kernel):
                    text = json.dumps(e, indent=1)
                    out.write(("" if first else ",\n") + text)
                    first = False
                    written += len(text) + 2
                    events += 1
                ts += dur + 2
            marker = {"ph": "X", "cat": "user_annotation", "name": f"execute_model#{step}",
                      "pid": 1, "tid": 1, "ts": round(step_start, 3),
                      "dur": round(ts - step_start, 3)}  # fmt: skip
            out.write(",\n" + json.dumps(marker, indent=1))
            events += 1
            step += 1
        out.write('\n], "traceName": "synthetic"}\n')
    return events


CHILD = """
import json, resource, sys, time
from pathlib import Path
from tunelab.analysis.profiles.summary import summarize
t0 = time.perf_counter()
s = summarize([Path(sys.argv[1])], top=5)
elapsed = time.perf_counter() - t0
print(json.dumps({"seconds": elapsed, "events": s.events,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "gpu_idle_share": s.gpu_idle_share,
                  "top": [[t.name[:40], t.self_ms] for t in s.top]}))
"""


def json_bytes(path: Path) -> int:
    """The size of the JSON text (a gzipped file decompressed on the fly)."""
    with path.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    if not gzipped:
        return path.stat().st_size
    total = 0
    with gzip.open(path, "rb") as src:
        while block := src.read(1 << 20):
            total += len(block)
    return total


def measure(path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=50, help="size of the synthetic trace (MB)")
    parser.add_argument("--gzip", action="store_true", help="write the synthetic trace gzipped")
    parser.add_argument("--trace", type=Path, help="measure this trace instead of a synthetic one")
    args = parser.parse_args(argv)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as tmp:
        if args.trace:
            path = args.trace
        else:
            path = Path(tmp) / ("synthetic.json.gz" if args.gzip else "synthetic.json")
            t0 = time.perf_counter()
            generate(path, args.mb, args.gzip)
            print(f"generated {path.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        size = path.stat().st_size
        text = json_bytes(path)
        r = measure(path)
    seconds = float(r["seconds"])  # type: ignore[arg-type]
    print(
        "| file | bytes on disk | JSON bytes | events | parse s | JSON MB/s | peak RSS MB "
        "| GPU idle |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(
        f"| {path.name} | {size} | {text} | {r['events']} | {seconds:.2f} "
        f"| {text / 1e6 / seconds:.1f} | {int(r['peak_rss_kb']) / 1024:.0f} "  # type: ignore[call-overload]
        f"| {r['gpu_idle_share']} |"
    )
    print(f"(generator process peak before measuring: {baseline / 1024:.0f} MB)", file=sys.stderr)
    print(json.dumps(r["top"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
