"""A real agent's /metrics and /metrics/engines, with fake engines that serve a /metrics page.

The fake engine lives here too: ``python -m tests.integration.test_metrics_engines --port N
--body vllm`` answers /health and serves tests/unit/metrics/fixtures/engines/<body>.txt on /metrics
(optionally after --metrics-delay seconds, to play a stuck engine).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import wait_state
from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2

REPO = Path(__file__).resolve().parents[2]
BODIES = REPO / "tests" / "unit" / "metrics" / "fixtures" / "engines"
SNAPSHOT = REPO / "tests" / "unit" / "metrics" / "fixtures" / "nvml" / "h200-busy-full.json"


# --- the fake engine ---------------------------------------------------------------------------


def serve_engine(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--metrics-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    body = (BODIES / f"{args.body}.txt").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            payload = b""
            if self.path == "/metrics":
                time.sleep(args.metrics_delay)
                payload = body
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
    return 0


def engine_spec(name: str, body: str, *extra: str) -> server_pb2.ServerSpec:
    port = free_port()
    argv = [sys.executable, "-m", "tests.integration.test_metrics_engines", "--port", str(port)]
    return server_pb2.ServerSpec(
        argv=[*argv, "--body", body, *extra], port=port, name=name, cwd=str(REPO)
    )


# --- helpers -----------------------------------------------------------------------------------


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.read(), dict(reply.headers)


def text(url: str) -> str:
    return fetch(url)[0].decode()


def wait_for_text(url: str, wanted: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = text(url)
        if wanted in body:
            return body
        time.sleep(0.1)
    raise AssertionError(f"{wanted!r} never appeared at {url}:\n{body[-3000:]}")


def promtool(exposition: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool missing: install Debian's prometheus package (.ci/run does)"
    return subprocess.run(
        [binary, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )


class Agent:
    def __init__(self, proc: AgentProcess, metrics_port: int) -> None:
        self.proc = proc
        self.stub: agent_pb2_grpc.AgentStub = proc.stub()
        self.url = f"http://127.0.0.1:{metrics_port}"
        self.started: list[str] = []

    def start_engine(self, spec: server_pb2.ServerSpec) -> str:
        reply = self.stub.StartServer(agent_pb2.StartServerRequest(spec=spec), timeout=10)
        self.started.append(reply.server.id)
        wait_state(self.stub, reply.server.id, server_pb2.SERVER_STATE_READY)
        return str(reply.server.id)

    def stop(self, server_id: str) -> None:
        request = agent_pb2.StopServerRequest(id=server_id, grace_seconds=5)
        self.stub.StopServer(request, timeout=60)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    port = free_port()
    args = ["--metrics-listen", f"127.0.0.1:{port}", "--nvml-snapshot", str(SNAPSHOT)]
    proc = AgentProcess(tmp_path / "agent", args).start()
    running = Agent(proc, port)
    try:
        yield running
    finally:
        for server_id in running.started:
            running.stop(server_id)
        proc.terminate()


# --- tests -------------------------------------------------------------------------------------


def test_metrics_and_engines_pass_promtool_and_carry_gpus_host_and_servers(agent: Agent) -> None:
    llama = agent.start_engine(engine_spec("llama", "vllm"))
    agent.start_engine(engine_spec("qwen", "sglang"))
    ready = 'tunelab_server_state{server="qwen",state="READY"} 1.0'
    metrics = wait_for_text(f"{agent.url}/metrics", ready)
    check = promtool(metrics)
    assert check.returncode == 0 and not check.stdout + check.stderr, check
    families = {f.name: f for f in parse_text(metrics)}
    power = families["tunelab_gpu_power_watts"].samples[0]
    assert power.value == 622.792  # the busy H200 capture
    assert set(power.labels) == {"gpu", "uuid"}
    assert families["tunelab_host_memory_total_bytes"].samples[0].value > 0
    assert 'tunelab_server_state{server="llama",state="READY"} 1.0' in metrics

    engines = text(f"{agent.url}/metrics/engines")
    check = promtool(engines)
    assert check.returncode == 0 and not check.stdout + check.stderr, check
    engine_families = {f.name: f for f in parse_text(engines)}
    running = engine_families["vllm_num_requests_running"].samples
    assert [(s.labels["server"], s.value) for s in running] == [("llama", 4.0)]
    throughput = engine_families["sglang_gen_throughput"].samples
    assert [(s.labels["server"], s.value) for s in throughput] == [("qwen", 812.5)]
    success = {
        s.labels["server"]: s.value
        for s in engine_families["tunelab_engine_scrape_success"].samples
    }
    assert success == {"llama": 1.0, "qwen": 1.0}

    agent.stop(llama)
    stopped = 'tunelab_server_state{server="llama",state="STOPPED"} 1.0'
    wait_for_text(f"{agent.url}/metrics", stopped)
    assert 'server="llama"' not in text(f"{agent.url}/metrics/engines")


def test_openmetrics_gzip_and_name_filter_on_request(agent: Agent) -> None:
    wait_for_text(f"{agent.url}/metrics", "tunelab_host_load1")
    body, headers = fetch(
        f"{agent.url}/metrics", {"Accept": "application/openmetrics-text;version=1.0.0"}
    )
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in parse_openmetrics(body.decode())}  # strict: fails on errors
    assert families["tunelab_gpu"].type == "info"
    assert families["tunelab_gpu_energy_joules"].type == "counter"
    assert not [name for name in families if name.endswith("_created")]

    body, headers = fetch(f"{agent.url}/metrics", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert b"tunelab_gpu_power_watts{" in gzip.decompress(body)

    only = text(f"{agent.url}/metrics?name[]=tunelab_host_load1")
    assert [f.name for f in parse_text(only)] == ["tunelab_host_load1"]

    with pytest.raises(urllib.error.HTTPError) as missing:
        fetch(f"{agent.url}/nothing-here")
    assert missing.value.code == 404


def test_a_stuck_engine_never_holds_up_metrics(agent: Agent) -> None:
    agent.start_engine(engine_spec("stuck", "vllm", "--metrics-delay", "30"))
    agent.start_engine(engine_spec("fine", "sglang"))
    for name in ("stuck", "fine"):  # READY as the sampler saw it: what /metrics/engines fetches
        wait_for_text(
            f"{agent.url}/metrics", f'tunelab_server_state{{server="{name}",state="READY"}} 1.0'
        )
    engines: dict[str, str] = {}
    scrape = threading.Thread(
        target=lambda: engines.update(body=text(f"{agent.url}/metrics/engines"))
    )
    scrape.start()
    metrics = text(f"{agent.url}/metrics")  # answered while the engines scrape waits on "stuck"
    assert scrape.is_alive()
    assert "tunelab_gpu_power_watts" in metrics
    scrape.join(30)
    families = {f.name: f for f in parse_text(engines["body"])}
    success = {
        s.labels["server"]: s.value for s in families["tunelab_engine_scrape_success"].samples
    }
    assert success == {"stuck": 0.0, "fine": 1.0}
    assert "vllm_num_requests_running" not in families
    assert families["sglang_gen_throughput"].samples[0].labels["server"] == "fine"


if __name__ == "__main__":
    raise SystemExit(serve_engine())
