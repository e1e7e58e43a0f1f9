"""How fast is READY noticed? The agent's probe against a bash loop polling with curl every 10 s.

Each start launches a test server through a real agent process; the server writes the moment it
became ready and the moment it sent its first 2xx (its own clock). For every start, a
`until curl -sf ...; do sleep 10; done` loop is started beside it, as engineers do by hand.

Latency, per detector:
  agent:     first 2xx sent → READY event (ready_at)   — what the issue asks for;
             ready → READY event                       — including the probe interval;
  curl loop: ready → the loop's exit.
Beside each, the HTTP requests the agent's probe sent before READY (the engine logs each one).

``--engine vllm`` starts a real vLLM instead (``make test-engines`` builds its venv; pass it as
TUNELAB_ENGINES_VENV): the engine is ready when its port opens (a 5 ms TCP poller watches),
and its access log is counted for /health lines. Server on core 0, this script on core 1.
Usage: python benchmarks/readiness_latency.py [--starts 20] [--poll 10] [--engine vllm]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import fake_spec, start, watch_until
from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2

CURL_LOOP = 'until curl -sf -o /dev/null "$0"; do sleep "$1"; done; date +%s.%N'


def one_start(
    stub: agent_pb2_grpc.AgentStub, work: Path, index: int, poll: float
) -> dict[str, float]:
    port = free_port()
    ready_since = work / f"{index}.since"
    first_2xx = work / f"{index}.first"
    load = random.uniform(0.5, poll - 0.5)
    spec = fake_spec(
        port, "--load-seconds", f"{load:.3f}", "--shards", "8",
        "--ready-file", str(first_2xx), "--ready-since-file", str(ready_since),
    )  # fmt: skip
    server = start(stub, spec)
    loop = subprocess.Popen(
        ["bash", "-c", CURL_LOOP, f"http://127.0.0.1:{port}/health", str(poll)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    final = watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY], timeout=120)[-1]
    loop_out, _ = loop.communicate(timeout=poll * 3)
    stub.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=5), timeout=60)
    since = float(ready_since.read_text())
    return {
        "agent_from_first_2xx": final.ready_at - float(first_2xx.read_text()),
        "agent_from_ready": final.ready_at - since,
        "curl_from_ready": float(loop_out.strip()) - since,
        "probe_requests": final.probe_requests,
    }


def one_vllm_start(stub: agent_pb2_grpc.AgentStub, work: Path, index: int) -> dict[str, float]:
    """A real vLLM start: READY against the moment its port accepted (vLLM opens it when ready)."""
    import os
    import re
    import threading

    from tests.engines.conftest import _port_watch, vllm_spec

    venv = Path(os.environ["TUNELAB_ENGINES_VENV"])
    model = work / "tiny-llama"
    if not (model / "config.json").exists():
        make = Path(__file__).resolve().parent.parent / "tests" / "engines" / "make_model.py"
        subprocess.run([str(venv / "bin" / "python"), "-P", str(make), str(model)], check=True)
    cache = Path.home() / ".cache" / "tunelab" / "vllm-compile-cache"
    port = free_port()
    stop, opened = threading.Event(), list[float]()
    poller = threading.Thread(target=_port_watch, args=(port, stop, opened), daemon=True)
    poller.start()
    server = start(stub, vllm_spec(venv, model, port, cache))
    final = watch_until(stub, server.id, [server_pb2.SERVER_STATE_READY], timeout=600)[-1]
    stop.set()
    poller.join(2)
    log = Path(final.log_path).read_text(errors="replace")
    stub.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=30), timeout=60)
    watch_until(stub, server.id, [server_pb2.SERVER_STATE_STOPPED], timeout=120)
    return {
        "agent_from_ready": final.ready_at - opened[0],
        "probe_requests": final.probe_requests,
        "health_log_lines": len(re.findall(r'"GET /health HTTP', log)),
        "start_seconds": final.ready_seconds,
    }


def vllm_main(starts: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        agent = AgentProcess(work / "agent").start()
        try:
            runs = [one_vllm_start(agent.stub(), work, i) for i in range(starts)]
        finally:
            agent.terminate()
    print(f"real vLLM 0.32 (CPU), {starts} starts, server on core 0, agent probe interval 50 ms")
    print(
        f"{'start':>5} {'spawn->READY':>13} {'port open->READY':>17} {'HTTP probes':>12} "
        f"{'/health log lines':>18}"
    )
    for i, r in enumerate(runs):
        print(
            f"{i:>5} {r['start_seconds']:>12.1f}s {r['agent_from_ready'] * 1000:>15.1f}ms "
            f"{r['probe_requests']:>12} {r['health_log_lines']:>18}"
        )
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--poll", type=float, default=10.0, help="curl loop sleep (s)")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--engine", choices=("fake", "vllm"), default="fake")
    args = parser.parse_args(argv)
    if args.engine == "vllm":
        return vllm_main(args.starts)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        agent = AgentProcess(work / "agent").start()
        try:
            stub = agent.stub()
            with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
                runs = list(
                    pool.map(lambda i: one_start(stub, work, i, args.poll), range(args.starts))
                )
        finally:
            agent.terminate()
    print(
        f"readiness latency over {args.starts} starts "
        f"(agent probe interval 50 ms; curl loop sleep {args.poll:g} s)"
    )
    print(f"{'detector':<34} {'median':>10} {'p99':>10} {'max':>10}")
    for key, label in (
        ("agent_from_first_2xx", "agent: first 2xx -> READY"),
        ("agent_from_ready", "agent: server ready -> READY"),
        ("curl_from_ready", f"curl loop ({args.poll:g} s): ready -> seen"),
    ):
        values = [r[key] * 1000 for r in runs]
        print(
            f"{label:<34} {statistics.median(values):>8.1f}ms {percentile(values, 0.99):>8.1f}ms "
            f"{max(values):>8.1f}ms"
        )
    probes = [r["probe_requests"] for r in runs]
    print(
        f"HTTP probe requests before READY: median {statistics.median(probes):g}, "
        f"max {max(probes):g} (the fake answers 503 from spawn until loaded, prints no ready line)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
