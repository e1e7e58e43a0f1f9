"""The agent's timeline parts on fixtures: the engine's names per profile, the host's CPU
shares from a fixture /proc, the GPU fields from the replayed NVML snapshot, and the recorder's
windows, counters and bounds on a fake clock (no thread, no socket)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.agent.gpu import SnapshotBackend
from tunelab.agent.system import System
from tunelab.agent.timeline.engine import parse_engine, read_engine
from tunelab.agent.timeline.probes import HostProbe, gpu_facts, read_gpus
from tunelab.agent.timeline.recorder import TimelineRecorder
from tunelab.bench.timeline.document import MAX_SERIES, bounded

NVML = Path(__file__).parents[2] / "fixtures" / "nvml" / "h200-busy-v2.json"

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.91
vllm:num_preemptions_total{engine="0",model_name="m"} 12.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1024.0
vllm:generation_tokens_total{engine="0",model_name="m"} 5000.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
"""
SGLANG = """sglang:num_running_reqs{model_name="m",tp_rank="0"} 32.0
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 9.0
sglang:token_usage{model_name="m",tp_rank="0"} 0.99
sglang:num_retracted_requests_total{model_name="m"} 4.0
sglang:cached_tokens_total{model_name="m"} 100.0
"""


def test_vllm_and_sglang_names_map_to_one_set_of_series() -> None:
    profile, values = parse_engine(VLLM)
    assert profile == "vllm"
    assert values["engine.running"] == 12.0  # summed over data-parallel engines
    assert values["engine.waiting"] == 3.0
    assert values["engine.kv_cache_usage"] == 0.91
    assert values["engine.preemptions"] == 12.0
    assert values["engine.prefix_cache_hits"] == 640.0
    profile, values = parse_engine(SGLANG)
    assert profile == "sglang"
    assert (values["engine.running"], values["engine.waiting"]) == (32.0, 9.0)
    assert values["engine.preemptions"] == 4.0  # retracted requests
    assert parse_engine("process_cpu_seconds_total 3.0\n") == ("", {})


def test_a_malformed_huge_or_failing_exposition_gives_no_engine_values() -> None:
    bad = "vllm:num_requests_running{model_name=m} 7\n"  # unquoted label value

    def answer(text: str | Exception):  # type: ignore[no-untyped-def]
        def fetch(port: int, timeout: float, max_bytes: int) -> str:
            if isinstance(text, Exception):
                raise text
            return text

        return fetch

    assert read_engine(1, 0.1, answer(bad)) == ("", {})
    assert read_engine(1, 0.1, answer(ValueError("/metrics larger than 4194304 bytes"))) == ("", {})
    assert read_engine(1, 0.1, answer(TimeoutError("timed out"))) == ("", {})
    assert read_engine(1, 0.1, answer(VLLM))[0] == "vllm"


def write_proc(root: Path, cpu: list[int], cpu0: list[int], client: tuple[int, int, int]) -> None:
    (root / "proc" / "42").mkdir(parents=True, exist_ok=True)
    line = " ".join(str(x) for x in cpu)
    line0 = " ".join(str(x) for x in cpu0)
    (root / "proc" / "stat").write_text(f"cpu  {line}\ncpu0 {line0}\nintr 1 2\n")
    utime, stime, wait_ns = client
    fields = ["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 23 + ["3"]
    (root / "proc" / "42" / "stat").write_text(f"42 (python3 -m x) {' '.join(fields)}\n")
    (root / "proc" / "42" / "schedstat").write_text(f"1000 {wait_ns} 7\n")


def test_host_shares_from_a_fixture_proc(tmp_path: Path) -> None:
    #                  user nice system idle iowait irq softirq steal
    write_proc(tmp_path, [100, 0, 0, 100, 0, 0, 0, 0], [50, 0, 0, 50, 0, 0, 0, 0], (10, 0, 0))
    probe = HostProbe(System(tmp_path), client_pid=42)
    first = probe.read(100.0)
    assert "host.cpu_ratio" not in first and first["host.client_cpu_ratio"] is None
    write_proc(
        tmp_path, [160, 0, 0, 120, 0, 0, 0, 20], [90, 0, 0, 60, 0, 0, 0, 0], (60, 40, 250_000_000)
    )
    second = probe.read(102.0)
    assert second["host.cpu_ratio"] == pytest.approx(80 / 100)  # (60 busy + 20 steal) / 100
    assert second["host.steal_ratio"] == pytest.approx(0.2)
    assert second["host.cpu0_ratio"] == pytest.approx(40 / 50)
    assert second["host.cpu_max_ratio"] == pytest.approx(0.8)
    assert second["host.client_cpu_ratio"] == pytest.approx(0.9 / 2.0)  # 90 ticks in 2 s
    assert second["host.client_wait_ratio"] == pytest.approx(0.25 / 2.0)
    assert second["host.client_core"] == 3.0


def test_gpu_fields_from_the_replayed_nvml_snapshot() -> None:
    gpu = SnapshotBackend.load(NVML)
    values = read_gpus(gpu)
    assert values["gpu0.power_watts"] == pytest.approx(621.0, abs=0.01)
    assert values["gpu0.clock_event_reasons"] == 4.0
    assert gpu_facts(gpu)[0]["power_limit_watts"] == 700.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_recorder_files_ticks_by_window_and_counters_as_rises(tmp_path: Path) -> None:
    clock = FakeClock()
    preempted = iter([10.0, 10.0, 15.0, 3.0, 3.0])  # 3.0: the engine restarted
    texts = iter(
        f"vllm:num_requests_running 4\nvllm:num_preemptions_total {p}\n" for p in preempted
    )

    def fetch(port: int, timeout: float, max_bytes: int) -> str:
        return next(texts)

    write_proc(tmp_path, [1, 0, 0, 1, 0, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0, 0], (0, 0, 0))
    recorder = TimelineRecorder(
        0.5,
        SnapshotBackend.load(NVML),
        HostProbe(System(tmp_path)),
        engine_port=8000,
        clock=clock,
        fetch=fetch,
    )
    for at in (0.0, 0.5, 1.0, 2.0, 2.5):  # the tick at 1.5 s is missed (a slow engine)
        clock.now = 1000.0 + at
        recorder.tick()
    client = {"step_seconds": 0.5, "windows": 6, "series": {"client.completed": [1.0] * 6}}
    doc = recorder.document(client)
    assert doc["windows"] == 6 and doc["engine"] == "vllm" and doc["batch_flag"] == "--max-num-seqs"
    assert doc["series"]["engine.running"] == [4.0, 4.0, None, 4.0, 4.0, None]
    assert doc["series"]["engine.preemptions"] == [0.0, 5.0, None, 3.0, 0.0, None]
    assert doc["series"]["client.completed"] == [1.0] * 6
    assert doc["series"]["gpu0.power_watts"][:2] == pytest.approx([621.0, 621.0], abs=0.01)


def test_the_recorder_stops_at_its_tick_cap_and_the_document_is_bounded() -> None:
    recorder = TimelineRecorder(
        0.1, SnapshotBackend.load(NVML), HostProbe(System("/nonexistent")), None, max_ticks=3
    )
    recorder.start()
    recorder._thread.join(10)  # type: ignore[union-attr]  # ends itself at the cap
    assert recorder.ticks == 3 and recorder.truncated
    series = {f"host.cpu{i}_ratio": [0.5] * 4000 for i in range(MAX_SERIES + 10)}
    series["client.completed"] = [1.0] * 4000
    doc = bounded({"step_seconds": 1.0, "windows": 4000, "series": series}, max_values=50_000)
    assert len(doc["series"]) == MAX_SERIES and "client.completed" in doc["series"]
    assert len(doc["dropped_series"]) == 11
    assert doc["windows"] * len(doc["series"]) <= 50_000
    assert doc["downsampled"] == 13 and doc["step_seconds"] == 13.0
    assert doc["series"]["client.completed"][0] == 13.0  # counts add up when windows merge
    assert doc["series"]["host.cpu0_ratio"][0] == 0.5  # gauges average
