"""Where a closed-loop point's clock starts, against the simulator (issue 26, item 6).

For each concurrency C: one point of ``--waves`` x C requests at the simulator, then, from the
per-request lines, how long after the first request was begun the first one was written, and
the client's output throughput against the throughput over the window the server was actually
sent work (first request written → last token received). Before the fix the clock started
when the first request was begun, before C connections were set up and C requests built, so
at C = 256 the first write came 173-262 ms late and the throughput read ~10 % under.

Usage::

    .venv/bin/python benchmarks/clock_start.py [--concurrency 1,16,256] [--waves 2]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunelab.bench.config import BenchConfig  # noqa: E402
from tunelab.bench.simulator.process import SimulatorProcess  # noqa: E402
from tunelab.bench.sweep import run_sweep  # noqa: E402


def measure(url: str, c: int, waves: int, output_len: int) -> dict[str, float | str]:
    config = BenchConfig(
        url=url, model="tunelab-sim", concurrency=(c,), requests=waves * c, input_len=32,
        output_len=output_len,
    ).with_preset()  # fmt: skip
    out = io.StringIO()
    point = run_sweep(config, out)["points"][0]
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    lines = [x for x in lines if not x["warmup"] and x["ok"]]
    launch = min(x["start_s"] for x in lines)  # the first request begun
    first_write = min(x["start_s"] + x["send_delay_ms"] / 1000.0 for x in lines)
    last_token = max(
        x["start_s"] + (x["send_delay_ms"] + x["chunk_ms"][-1]) / 1000.0 for x in lines
    )
    window = last_token - first_write
    return {
        "clock_start": str(point.get("clock_start", "point start (old)")),
        "first_write_ms": (first_write - launch) * 1000.0,
        "client_tok_s": point["output_throughput"],
        "window_tok_s": point["total_output_tokens"] / window,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--concurrency", default="1,16,256")
    p.add_argument("--waves", type=int, default=2)
    p.add_argument("--output-len", type=int, default=32)
    args = p.parse_args()
    print(
        "| C | clock start | launch -> first write, ms | client tok/s | sent-window tok/s "
        "| client vs window |"
    )
    print("|---:|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        sim_args = ["--ttft-ms", "100", "--itl-ms", "20"]
        with SimulatorProcess(sim_args, Path(tmp) / "sim.log") as sim:
            for c in (int(x) for x in args.concurrency.split(",")):
                m = measure(sim.url, c, args.waves, args.output_len)
                ratio = float(m["client_tok_s"]) / float(m["window_tok_s"]) - 1.0
                print(
                    f"| {c} | {m['clock_start']} | {m['first_write_ms']:.1f} | "
                    f"{m['client_tok_s']:,.0f} | {m['window_tok_s']:,.0f} | {ratio:+.1%} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
