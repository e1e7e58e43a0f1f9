"""A real Prometheus (Debian's package) scrapes a real agent; asserted through its query API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_metrics_engines import engine_spec
from tests.support.agent_proc import AgentProcess
from tests.support.ports import free_port
from tests.support.servers import wait_state
from tunelab.v1 import agent_pb2, server_pb2

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "tests" / "unit" / "metrics" / "fixtures" / "nvml" / "h200-busy-full.json"


class Prometheus:
    def __init__(self, workdir: Path, agent_port: int) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus missing: install Debian's prometheus package (.ci/run does)"
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: tunelab-agent
    static_configs:
      - targets: ["127.0.0.1:{agent_port}"]
        labels: {{host: e2e-host}}
  - job_name: tunelab-engines
    metrics_path: /metrics/engines
    scrape_interval: 3s
    scrape_timeout: 3s
    static_configs:
      - targets: ["127.0.0.1:{agent_port}"]
        labels: {{host: e2e-host}}
"""
        )
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as reply:
            return json.loads(reply.read())

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready:\n{self.log_path.read_text()[-3000:]}")

    def query(self, promql: str) -> list[dict[str, Any]]:
        reply = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert reply["status"] == "success", reply
        result: list[dict[str, Any]] = reply["data"]["result"]
        return result

    def wait_value(self, promql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The query's result once it is non-empty."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        targets = self.get("/api/v1/targets")
        raise AssertionError(f"{promql} stayed empty; targets: {json.dumps(targets)[:3000]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[AgentProcess, int]]:
    port = free_port()
    args = ["--metrics-listen", f"127.0.0.1:{port}", "--nvml-snapshot", str(SNAPSHOT)]
    proc = AgentProcess(tmp_path / "agent", args).start()
    try:
        yield proc, port
    finally:
        stub = proc.stub()
        for server in stub.ListServers(agent_pb2.ListServersRequest(), timeout=10).servers:
            stub.StopServer(agent_pb2.StopServerRequest(id=server.id, grace_seconds=5), timeout=60)
        proc.terminate()


def test_prometheus_scrapes_the_agent_and_its_engines(
    agent: tuple[AgentProcess, int], tmp_path: Path
) -> None:
    proc, metrics_port = agent
    stub = proc.stub()
    started = stub.StartServer(
        agent_pb2.StartServerRequest(spec=engine_spec("e2e-llama", "vllm")), timeout=10
    )
    wait_state(stub, started.server.id, server_pb2.SERVER_STATE_READY)

    prometheus = Prometheus(tmp_path, metrics_port)
    try:
        prometheus.wait_ready()
        up = prometheus.wait_value('up{job="tunelab-agent"} == 1')
        assert up[0]["metric"]["host"] == "e2e-host"

        memory = prometheus.wait_value("tunelab_host_memory_total_bytes")
        assert float(memory[0]["value"][1]) > 0
        assert prometheus.wait_value("tunelab_host_load1")

        ready = prometheus.wait_value('tunelab_server_state{server="e2e-llama",state="READY"} == 1')
        assert ready[0]["metric"]["job"] == "tunelab-agent"
        power = prometheus.wait_value("tunelab_gpu_power_watts")
        assert float(power[0]["value"][1]) == 622.792
        assert set(power[0]["metric"]) == {"__name__", "gpu", "uuid", "instance", "job", "host"}

        assert prometheus.wait_value('up{job="tunelab-engines"} == 1')
        running = prometheus.wait_value('vllm_num_requests_running{server="e2e-llama"}')
        assert float(running[0]["value"][1]) == 4.0
        assert running[0]["metric"]["job"] == "tunelab-engines"
    finally:
        prometheus.stop()
