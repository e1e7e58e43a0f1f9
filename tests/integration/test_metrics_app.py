"""AgentApp in this process, real servers and real HTTP: per-server GPU memory, and a host
without a GPU driver (the NVML side is a captured snapshot or NoGpuBackend; nothing else is)."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from tests.support.ports import free_port
from tests.support.servers import FAKE_SERVER
from tunelab.agent.config import AgentConfig
from tunelab.agent.daemon import AgentApp
from tunelab.agent.gpu import GpuBackend, GpuProcess, NoGpuBackend, SnapshotBackend
from tunelab.agent.runs.record import CommandBench, RunSpec
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.servers.states import ServerState
from tunelab.v1 import agent_pb2, agent_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "tests" / "unit" / "metrics" / "fixtures" / "nvml" / "h200-busy-full.json"


def running_app(tmp_path: Path, gpu: GpuBackend) -> AgentApp:
    config = AgentConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        metrics_listen="127.0.0.1:0",
        audit_on_start=False,
    )
    app = AgentApp(config, gpu=gpu)
    app.start()
    return app


def metrics(app: AgentApp) -> str:
    url = f"http://127.0.0.1:{app.metrics.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: bytes = reply.read()
    return body.decode()


def wait_for(app: AgentApp, wanted: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = metrics(app)
        if wanted in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{wanted!r} not on /metrics:\n{text[-3000:]}")


def start_fake(app: AgentApp, name: str) -> str:
    port = free_port()
    spec = ServerSpec(
        argv=(sys.executable, str(FAKE_SERVER), "--port", str(port), "--load-seconds", "0.2"),
        port=port,
        name=name,
    )
    record = app.registry.start(spec.validated())
    assert app.registry.wait_for(record.id, lambda r: r.state is ServerState.READY, 30)
    return record.id


@pytest.fixture
def snapshot_app(tmp_path: Path) -> Iterator[tuple[AgentApp, SnapshotBackend]]:
    backend = SnapshotBackend(json.loads(SNAPSHOT.read_text()))
    backend.processes = []
    app = running_app(tmp_path, backend)
    try:
        yield app, backend
    finally:
        backend.processes = []  # the processes are about to end, as NVML would then say
        for record in app.registry.servers():
            app.registry.stop(record.id, grace=5, wait=30)
        app.close()


def test_gpu_memory_of_a_servers_processes_reaches_metrics_and_grpc(
    snapshot_app: tuple[AgentApp, SnapshotBackend],
) -> None:
    app, backend = snapshot_app
    server_id = start_fake(app, "llama")
    leader = app.registry.get(server_id).pid
    uuid = str(backend.read(0, "uuid"))
    # NVML now lists the server's leader holding 9.6 GB (the captured busy value) and a stranger
    backend.processes = [GpuProcess(0, uuid, leader, 9600761856), GpuProcess(0, uuid, 1, 1234)]

    text = wait_for(app, 'tunelab_server_gpu_memory_bytes{server="llama",gpu="0"} 9.600761856e+09')
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["tunelab_gpu_compute_processes"].samples[0].value == 2
    assert (
        families["tunelab_gpu_compute_process_memory_bytes"].samples[0].value == 9600761856 + 1234
    )

    assert app.daemon is not None
    with grpc.insecure_channel(f"127.0.0.1:{app.daemon.port}") as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        reply = stub.GetServer(agent_pb2.GetServerRequest(id=server_id), timeout=10)
    assert reply.server.gpu_memory_bytes == 9600761856


def test_metrics_registry_takes_other_collectors(
    snapshot_app: tuple[AgentApp, SnapshotBackend],
) -> None:
    from prometheus_client import Counter

    app, _ = snapshot_app
    requests = Counter(
        "tunelab_bench_requests", "Requests sent.", ["outcome"], registry=app.metrics_registry
    )
    requests.labels("ok").inc(5)
    text = wait_for(app, 'tunelab_bench_requests_total{outcome="ok"} 5.0')
    assert "tunelab_bench_requests_created" not in text


def test_the_endpoint_reports_its_connections_and_only_a_run_reads_energy_every_tick(
    snapshot_app: tuple[AgentApp, SnapshotBackend],
) -> None:
    app, backend = snapshot_app
    backend.processes = []  # no compute process: the counter is read with the slow fields
    text = wait_for(app, "tunelab_agent_http_connections 1.0")  # this scrape's own connection
    assert "tunelab_agent_http_rejected_total 0.0" in text
    server_id = start_fake(app, "llama")  # an idle READY server that no run measures
    reads = app.metrics.gpu_source.energy_reads
    time.sleep(3.2)
    assert app.metrics.gpu_source.energy_reads <= reads + 1  # a slow read at most (15 s)
    spec = RunSpec(
        server=None,
        server_id=server_id,
        builtin=None,
        command=CommandBench(argv=("sleep", "30"), result_file="result.json"),
        max_duration=0,
    )
    run, _ = app.runs.start("measured", spec)  # a run: every GPU counts as having work
    try:
        reads = app.metrics.gpu_source.energy_reads
        time.sleep(3.2)
        assert app.metrics.gpu_source.energy_reads >= reads + 2
    finally:
        app.runs.cancel(run.run_id)
        deadline = time.monotonic() + 30  # its job's monitor is gone only once the run ends
        while not app.runs.is_finished(run.run_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert app.runs.is_finished(run.run_id)


def test_a_host_without_a_driver_exports_host_and_server_metrics_and_says_so_once(
    tmp_path: Path,
) -> None:
    with capture_logs() as logs:
        app = running_app(tmp_path, NoGpuBackend("NVML unavailable: Driver Not Loaded"))
        try:
            start_fake(app, "cpu-only")
            text = wait_for(app, 'tunelab_server_state{server="cpu-only",state="READY"} 1.0')
            time.sleep(1.5)  # a few more sampler ticks: still only one message
            text = metrics(app)
        finally:
            for record in app.registry.servers():
                app.registry.stop(record.id, grace=5, wait=30)
            app.close()
    off = [e for e in logs if e["event"] == "gpu_metrics_off"]
    assert len(off) == 1 and "Driver Not Loaded" in off[0]["reason"]
    names = {f.name for f in text_string_to_metric_families(text)}
    assert not [n for n in names if n.startswith("tunelab_gpu_")]
    assert {
        "tunelab_host_load1",
        "tunelab_host_memory_total_bytes",
        "tunelab_server_state",
    } <= names
    assert "tunelab_agent_gpu_metrics_enabled 0.0" in text
    assert not [e for e in logs if e["event"] == "metrics_sample_failed"]
