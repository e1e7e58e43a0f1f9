"""Server metrics from real ServerRecord objects and NVML compute processes."""

from __future__ import annotations

import os
from collections.abc import Sequence

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tunelab.agent.engines.progress import LoadProgress
from tunelab.agent.gpu import Cadence, GpuProcess
from tunelab.agent.metrics.servers import ServerCollector, ServerSource, attribute_gpu_memory
from tunelab.agent.procs.process import ProcessId
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.servers.states import ServerState

NOW = 1_800_000_000.0
UUID = "GPU-d054c584-9e1b-bfe2-19d0-26060914d318"


def _me() -> ProcessId:
    me = ProcessId.of(os.getpid())  # as the product reads it (one boot time per process)
    assert me is not None
    return me


ME = _me()


def record(
    server_id: str,
    name: str,
    state: ServerState,
    *,
    port: int = 30000,
    finished_ago: float | None = None,
    pid: ProcessId | None = None,
) -> ServerRecord:
    return ServerRecord(
        id=server_id,
        spec=ServerSpec(argv=("python3", "-m", "sglang.launch_server"), port=port, name=name),
        state=state,
        pid=pid.pid if pid else 0,
        create_time=pid.create_time if pid else 0.0,
        started_at=NOW - 600,
        finished_at=NOW - finished_ago if finished_ago is not None else 0.0,
    )


class Servers:
    """Stands in for ServerRegistry.servers over a list the test edits."""

    def __init__(self, *records: ServerRecord) -> None:
        self.records = list(records)
        self.full_reads = 0

    def __call__(self, include_finished: bool) -> Sequence[ServerRecord]:
        self.full_reads += include_finished
        return [r for r in self.records if include_finished or r.state.is_live()]


def scrape(
    servers: Servers, processes: Sequence[GpuProcess] = ()
) -> tuple[ServerSource, CollectorRegistry]:
    source = ServerSource(servers, lambda: processes, clock=lambda: NOW)
    source.sample(Cadence.FAST)
    registry = CollectorRegistry()
    registry.register(ServerCollector(source))
    return source, registry


def test_a_ready_server_exports_state_progress_time_to_ready_and_adoptions() -> None:
    llama = record("srv-1", "llama", ServerState.READY, port=30001)
    llama.progress = LoadProgress("Loading safetensors checkpoint shards", 83, 83, 3.1, 0.0)
    llama.ready_seconds = 41.5
    llama.adoptions = 1
    _, registry = scrape(Servers(llama))
    for state in ServerState:
        expected = 1 if state is ServerState.READY else 0
        value = registry.get_sample_value(
            "tunelab_server_state", {"server": "llama", "state": state.value}
        )
        assert value == expected, state
    server = {"server": "llama"}
    assert registry.get_sample_value("tunelab_server_load_progress_ratio", server) == 1.0
    assert registry.get_sample_value("tunelab_server_time_to_ready_seconds", server) == 41.5
    assert registry.get_sample_value("tunelab_server_adoptions_total", server) == 1
    assert registry.get_sample_value("tunelab_server_restarts_total", server) == 0
    info = {"server": "llama", "server_id": "srv-1", "port": "30001"}
    assert registry.get_sample_value("tunelab_server_info", info) == 1


def test_a_loading_server_has_partial_progress_and_no_time_to_ready() -> None:
    loading = record("srv-2", "qwen", ServerState.LOADING)
    loading.progress = LoadProgress("Loading safetensors checkpoint shards", 45, 83, 3.1, 12.0)
    _, registry = scrape(Servers(loading))
    server = {"server": "qwen"}
    assert registry.get_sample_value("tunelab_server_load_progress_ratio", server) == 45 / 83
    assert registry.get_sample_value("tunelab_server_time_to_ready_seconds", server) is None


def test_restarts_count_earlier_servers_of_the_name_and_the_live_one_wins_the_label() -> None:
    servers = Servers(
        record("srv-a", "llama", ServerState.FAILED, finished_ago=3600),
        record("srv-b", "llama", ServerState.FAILED, finished_ago=30),
        record("srv-c", "llama", ServerState.READY),
    )
    _, registry = scrape(servers)
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}  # parses: no duplicates
    assert registry.get_sample_value("tunelab_server_restarts_total", {"server": "llama"}) == 2
    ready = {"server": "llama", "state": "READY"}
    assert registry.get_sample_value("tunelab_server_state", ready) == 1
    assert len(families["tunelab_server_state"].samples) == len(ServerState)


def test_finished_servers_stay_for_the_retention_window_only() -> None:
    servers = Servers(
        record("srv-1", "mistral", ServerState.FAILED, finished_ago=60),
        record("srv-2", "phi", ServerState.STOPPED, finished_ago=400),
    )
    _, registry = scrape(servers)
    failed = {"server": "mistral", "state": "FAILED"}
    assert registry.get_sample_value("tunelab_server_state", failed) == 1
    assert registry.get_sample_value("tunelab_server_info", {"server": "phi"}) is None
    names = {s.labels.get("server") for m in registry.collect() for s in m.samples}
    assert names == {"mistral"}


def test_a_server_that_ends_between_slow_ticks_shows_its_final_state_at_the_next_fast_tick() -> (
    None
):
    live = record("srv-1", "llama", ServerState.READY)
    servers = Servers(live)
    source, registry = scrape(servers)
    reads = servers.full_reads
    source.sample(Cadence.FAST)
    assert servers.full_reads == reads  # nothing changed: only live servers were read
    live.state = ServerState.FAILED
    live.finished_at = NOW - 1
    source.sample(Cadence.FAST)
    failed = {"server": "llama", "state": "FAILED"}
    assert registry.get_sample_value("tunelab_server_state", failed) == 1


def test_gpu_memory_is_attributed_by_pid_and_create_time() -> None:
    mine = record("srv-1", "llama", ServerState.READY, pid=ME)
    impostor = record(
        "srv-2", "qwen", ServerState.READY, port=30002, pid=ProcessId(ME.pid, ME.create_time - 99)
    )
    processes = [
        GpuProcess(0, UUID, ME.pid, 9_600_761_856),
        GpuProcess(1, "GPU-other", ME.pid, 1_000),
        GpuProcess(0, UUID, 4_194_000, 123),  # nobody's
    ]
    assert attribute_gpu_memory([mine], processes) == {"srv-1": {0: 9_600_761_856, 1: 1_000}}
    # same pid, different create time: the pid was reused by someone else; never attributed
    assert attribute_gpu_memory([impostor], processes) == {}

    source, registry = scrape(Servers(mine), processes)
    gpu0 = {"server": "llama", "gpu": "0"}
    assert registry.get_sample_value("tunelab_server_gpu_memory_bytes", gpu0) == 9_600_761_856
    assert source.gpu_memory_by_server() == {"srv-1": 9_600_762_856}


def test_gpu_memory_stays_attributed_when_the_boot_time_moves_by_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/proc/stat's btime is whole seconds of wall clock minus uptime: a slewed clock moves it
    by one, and psutil reads it afresh on every create_time(). The server is still itself."""
    import psutil._pslinux as pslinux

    moved = pslinux.boot_time() + 1.0
    monkeypatch.setattr(pslinux, "boot_time", lambda: moved)
    assert abs(psutil.Process().create_time() - ME.create_time) >= 0.95  # psutil's view moved
    mine = record("srv-1", "llama", ServerState.READY, pid=ME)
    processes = [GpuProcess(0, UUID, ME.pid, 4_096)]
    assert attribute_gpu_memory([mine], processes) == {"srv-1": {0: 4_096}}


def test_a_finished_server_exports_no_gpu_memory() -> None:
    done = record("srv-1", "llama", ServerState.STOPPED, finished_ago=5, pid=ME)
    _, registry = scrape(Servers(done), [GpuProcess(0, UUID, ME.pid, 5)])
    assert "tunelab_server_gpu_memory_bytes" not in generate_latest(registry).decode()
