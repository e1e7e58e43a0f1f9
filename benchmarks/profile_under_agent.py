"""A torch server doing real GEMMs and attention, profiled under the agent (issue 27's H200 figure).

One real agent (``tunelab-agent serve``) runs one run: it starts ``benchmarks/torch_server.py``
(engine ``generic``: the agent sets ``TUNELAB_PROFILE_DIR`` to the run's trace folder), the
built-in load generator drives two equal points at ``--concurrency``, and the profile brackets
point 0's window through the server's ``/start_profile`` and ``/stop_profile``. The kept trace
is fetched over ``FetchProfile`` and summarised by ``tunelab.analysis.profiles`` — what
``tunelab profile`` prints — beside what ``torch.profiler``'s own ``key_averages()`` says of the
same profile (the server writes it next to, not into, the trace folder). Point 1, unprofiled,
gives the profiler's overhead. Prints markdown; needs torch with CUDA::

    PYTHONPATH=$PWD:$PWD/agent:$PWD/proto:$PWD/controller \\
        python3 benchmarks/profile_under_agent.py [--concurrency 16] [--window 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.support.agent_proc import AgentProcess  # noqa: E402
from tunelab.analysis.profiles.summary import summarize  # noqa: E402
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2, server_pb2  # noqa: E402

R = run_pb2
FINAL = {
    R.RUN_STATE_SUCCEEDED, R.RUN_STATE_FAILED_STARTUP, R.RUN_STATE_FAILED_BENCHMARK,
    R.RUN_STATE_CANCELLED, R.RUN_STATE_TIMED_OUT,
}  # fmt: skip


def run_spec(args: argparse.Namespace, key_averages: Path) -> run_pb2.RunSpec:
    server = server_pb2.ServerSpec(
        argv=[args.server_python, str(HERE / "benchmarks" / "torch_server.py"), "--port", "{port}",
              "--key-averages", str(key_averages), "--layers", str(args.layers),
              "--device", args.device, "--hidden", str(args.hidden)],
        auto_port=True, ready_model="torch-decode", engine="generic",
        startup_timeout_seconds=600, stop_grace_seconds=10,
    )  # fmt: skip
    builtin = R.BuiltinBenchmark(
        model="torch-decode", concurrency=[args.concurrency, args.concurrency],
        requests=args.requests, input_len=16, output_len=args.output_len, warmup=args.concurrency,
        profile=R.ProfileSpec(point=0, window_seconds=args.window,
                              start_url="/start_profile", stop_url="/stop_profile"),
    )  # fmt: skip
    return R.RunSpec(
        server=server, benchmark=R.BenchmarkSpec(builtin=builtin), max_duration_seconds=1200
    )


def wait(stub: agent_pb2_grpc.AgentStub, run_id: str, timeout: float) -> run_pb2.Run:
    for update in stub.WatchRun(agent_pb2.WatchRunRequest(run_id=run_id), timeout=timeout):
        if update.run.state in FINAL:
            return update.run
    raise TimeoutError(run_id)


def fetch(stub: agent_pb2_grpc.AgentStub, run_id: str, name: str, into: Path) -> Path:
    chunks = stub.FetchProfile(agent_pb2.FetchProfileRequest(run_id=run_id, name=name), timeout=300)
    path = into / name
    with path.open("wb") as out:
        for chunk in chunks:
            out.write(chunk.data)
    return path


def table(summary: Any, averages: dict[str, dict[str, float]], rows: int) -> list[str]:
    lines = [
        "| kernel / op | tunelab self ms | key_averages self ms | tunelab calls | torch calls |",
        "|---|---:|---:|---:|---:|",
    ]
    for entry in summary.top[:rows]:
        torch_row = averages.get(entry.name, {})
        gpu = entry.kind == "gpu"
        theirs = torch_row.get("self_device_us" if gpu else "self_cpu_us")
        shown = f"{theirs / 1000:.3f}" if theirs is not None else "—"
        name = entry.name if len(entry.name) <= 70 else entry.name[:67] + "..."
        lines.append(
            f"| `{name}` | {entry.self_ms:.3f} | {shown} | {entry.calls} | "
            f"{int(torch_row['calls']) if torch_row else '—'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: dry run")
    parser.add_argument("--server-python", default=sys.executable, help="a python with torch")
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="profile-agent-") as tmp:
        work = Path(tmp)
        key_averages = work / "key_averages.json"
        agent = AgentProcess(work / "agent", extra_args=["--log-level", "warning"]).start()
        try:
            stub = agent.stub()
            began = time.monotonic()
            stub.StartRun(agent_pb2.StartRunRequest(run_id="torch-prof", spec=run_spec(
                args, key_averages)), timeout=30)  # fmt: skip
            final = wait(stub, "torch-prof", 1200)
            took = time.monotonic() - began
            if final.state != R.RUN_STATE_SUCCEEDED:
                print(f"run {R.RunState.Name(final.state)}: {final.message}\n{agent.log()[-4000:]}")
                return 1
            result = json.loads(final.result_json)
            profile = result["profile"]
            files = [fetch(stub, "torch-prof", t["name"], work) for t in profile["traces"]]
        finally:
            agent.terminate()
        if not files:
            print(f"no trace kept: {profile.get('warnings')}")
            return 1
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.monotonic()
        summary = summarize(files, top=args.top, output_tokens=profile["window"]["output_tokens"])
        parse_s = time.monotonic() - t0
        peak_mb = max(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
        averages = json.loads(key_averages.read_text())
        profiled, plain = result["points"][0], result["points"][1]
        size = sum(t["size_bytes"] for t in profile["traces"])
        gpu_name, torch_version = averages["meta"]["gpu"], averages["meta"]["torch"]
        idle = summary.gpu_idle_share
        overhead = 1 - profiled["output_throughput"] / plain["output_throughput"]
        window = profile["window"]
        lines = [
            f"# A torch server profiled under the agent ({gpu_name}, torch {torch_version})",
            "",
            (
                f"One run through `tunelab-agent serve` ({took:.0f} s): "
                f"`benchmarks/torch_server.py` ({args.layers} layers, hidden {args.hidden}, "
                f"KV 1024 tokens, {args.device}), two points at concurrency {args.concurrency}, "
                f"{args.requests} "
                f"requests of {args.output_len} tokens each; the profile brackets point 0 for "
                f"{args.window:g} s (generic engine: `/start_profile`, `/stop_profile`, "
                "`TUNELAB_PROFILE_DIR`)."
            ),
            "",
            (
                f"- trace kept: {len(files)} file(s), {size / 1e6:.2f} MB gzipped, "
                f"{summary.events:,} events; parsed in {parse_s:.2f} s (peak RSS {peak_mb:.0f} MB)"
            ),
            (
                f"- window: {window['output_tokens']} output tokens, ok={window['ok']}, "
                f"warnings {profile['warnings']}"
            ),
            "- GPU idle share (gaps between kernels per stream): "
            + (f"{idle:.1%}" if idle is not None else "none"),
            (
                f"- wall profiled {summary.wall_ms:.1f} ms, GPU self time "
                f"{summary.gpu_ms:.1f} ms, CPU op self time {summary.cpu_ms:.1f} ms; "
                f"steps {summary.steps}"
            ),
            (
                f"- output tok/s: profiled point {profiled['output_throughput']:.1f}, "
                f"unprofiled {plain['output_throughput']:.1f} (overhead {overhead:+.1%} "
                "over the whole point)"
            ),
            "",
            f"Categories (ms, basis {summary.categories_basis}): "
            + ", ".join(f"{k} {v:.1f}" for k, v in summary.categories.items() if v),
            "",
            *table(summary, averages["rows"], args.top),
        ]
        text = "\n".join(lines) + "\n"
        print(text)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "profile_under_agent.md").write_text(text)
            (args.out / "summary.json").write_text(json.dumps(summary.to_json(), indent=1))
            (args.out / "key_averages.json").write_text(key_averages.read_text())
            for path in files:
                (args.out / path.name).write_bytes(path.read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
