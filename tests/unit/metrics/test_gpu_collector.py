"""GPU metrics from a fake NVML that answers with values captured on the H200."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.metrics.roots import FIXTURES
from tunelab.agent.gpu import (
    FIELDS,
    Cadence,
    FieldValue,
    GpuBackend,
    GpuError,
    GpuProcess,
    NoGpuBackend,
    SnapshotBackend,
    fields_with,
)
from tunelab.agent.metrics.energy import EnergyCollector, EnergyTracker
from tunelab.agent.metrics.gpu_collector import GpuCollector
from tunelab.agent.metrics.gpu_source import GpuSource
from tunelab.agent.metrics.sampler import Sampler

REPO = Path(__file__).resolve().parents[3]
NVML = FIXTURES / "nvml"


def snapshot(name: str) -> dict[str, Any]:
    path = NVML / name if (NVML / name).exists() else REPO / "tests/fixtures/nvml" / name
    data: dict[str, Any] = json.loads(path.read_text())
    return data


class CountingBackend(SnapshotBackend):
    """The captured GPU, counting every NVML read, optionally failing some fields."""

    def __init__(self, data: dict[str, Any], failing: frozenset[str] = frozenset()) -> None:
        super().__init__(data)
        self.reads: dict[str, int] = {}
        self.process_reads = 0
        self.failing = failing

    def read(self, index: int, field: str) -> FieldValue:
        self.reads[field] = self.reads.get(field, 0) + 1
        if field in self.failing:
            raise GpuError(f"NVML_ERROR_UNKNOWN reading {field}")
        return super().read(index, field)

    def compute_processes(self) -> list[GpuProcess]:
        self.process_reads += 1
        return super().compute_processes()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sampled(backend: GpuBackend) -> tuple[GpuSource, CollectorRegistry, Sampler]:
    clock = Clock()
    source = GpuSource(backend, energy=EnergyTracker(clock=clock), clock=clock)
    sampler = Sampler([source], 1.0, 15.0, clock=clock)
    sampler.tick()
    registry = CollectorRegistry()
    registry.register(GpuCollector(source))
    registry.register(EnergyCollector(source.energy))
    return source, registry, sampler


def test_busy_h200_exports_its_captured_values_in_base_units() -> None:
    data = snapshot("h200-busy-full.json")
    fields = data["devices"][0]["fields"]
    _, registry, _ = sampled(SnapshotBackend(data))
    gpu = {"gpu": "0", "uuid": fields["uuid"]}
    assert registry.get_sample_value("tunelab_gpu_power_watts", gpu) == fields["power_watts"]
    assert registry.get_sample_value("tunelab_gpu_power_limit_watts", gpu) == 700.0
    assert registry.get_sample_value("tunelab_gpu_sm_clock_hertz", gpu) == fields["sm_clock_hertz"]
    assert registry.get_sample_value("tunelab_gpu_sm_clock_max_hertz", gpu) == 1.98e9
    assert registry.get_sample_value("tunelab_gpu_memory_total_bytes", gpu) == 150754820096
    assert (
        registry.get_sample_value("tunelab_gpu_energy_joules_total", gpu) == fields["energy_joules"]
    )
    assert registry.get_sample_value("tunelab_gpu_pcie_link_width", gpu) == 16
    assert registry.get_sample_value("tunelab_gpu_pcie_replays_total", gpu) == 0
    # the matmul load ran into the 700 W power cap: reason bit 0x4, and 4.9 s of capped time
    assert fields["clock_event_reasons"] == 4
    active = {**gpu, "reason": "sw_power_cap"}
    assert registry.get_sample_value("tunelab_gpu_clock_event_active", active) == 1
    idle = {**gpu, "reason": "gpu_idle"}
    assert registry.get_sample_value("tunelab_gpu_clock_event_active", idle) == 0
    assert registry.get_sample_value(
        "tunelab_gpu_clock_event_seconds_total", active
    ) == pytest.approx(4.942882688)
    severity = {**gpu, "severity": "uncorrected"}
    assert registry.get_sample_value("tunelab_gpu_ecc_errors_total", severity) == 0
    assert registry.get_sample_value("tunelab_gpu_compute_processes", gpu) == 1
    assert registry.get_sample_value("tunelab_gpu_compute_process_memory_bytes", gpu) == 9600761856
    info = {
        **gpu,
        "name": "NVIDIA H200",
        "pci_bus_id": fields["pci_bus_id"],
        "driver_version": "580.159.04",
        "cuda_driver_version": "13.0",
        "vbios_version": fields["vbios_version"],
        "compute_capability": "9.0",
        "numa_node": "",  # NVML said NOT_SUPPORTED in the VM: an empty label, i.e. none
    }
    assert registry.get_sample_value("tunelab_gpu_info", info) == 1


def test_idle_h200_shows_the_idle_clock_event_and_no_processes() -> None:
    data = snapshot("h200-idle-full.json")
    uuid = data["devices"][0]["fields"]["uuid"]
    _, registry, _ = sampled(SnapshotBackend(data))
    gpu = {"gpu": "0", "uuid": uuid}
    assert (
        registry.get_sample_value("tunelab_gpu_clock_event_active", {**gpu, "reason": "gpu_idle"})
        == 1
    )
    assert registry.get_sample_value("tunelab_gpu_compute_processes", gpu) == 0
    assert registry.get_sample_value("tunelab_gpu_compute_process_memory_bytes", gpu) == 0


def test_unsupported_fields_are_absent_not_zero() -> None:
    data = snapshot("h200-busy-full.json")
    backend = SnapshotBackend(data)
    for field in ("power_watts", "energy_joules", "clock_event_reasons", "ecc_corrected_volatile"):
        backend.set_field(0, field, None)  # what NVML_ERROR_NOT_SUPPORTED reads as
    _, registry, _ = sampled(backend)
    text = generate_latest(registry).decode()
    assert "tunelab_gpu_power_watts" not in text
    assert "tunelab_gpu_energy_joules_total" not in text
    assert "tunelab_gpu_clock_event_active" not in text
    assert 'severity="corrected"' not in text.split("tunelab_gpu_ecc_lifetime_errors_total")[0]
    assert "tunelab_gpu_temperature_celsius{" in text


def test_a_snapshot_from_before_the_counter_fields_exports_no_counter_series() -> None:
    # h200-busy.json was captured before FIELDS had clock-event counters: they read as unsupported
    _, registry, _ = sampled(SnapshotBackend(snapshot("h200-busy.json")))
    names = {m.name for m in registry.collect()}
    assert "tunelab_gpu_clock_event_seconds" not in names
    assert "tunelab_gpu_pcie_replays" not in names
    assert "tunelab_gpu_power_watts" in names


def test_each_field_is_read_at_its_own_cadence() -> None:
    backend = CountingBackend(snapshot("h200-busy-full.json"))
    source = GpuSource(backend)
    clock = Clock()
    sampler = Sampler([source], 1.0, 15.0, clock=clock)
    for _ in range(21):  # t = 0 .. 20 s
        sampler.tick()
        clock.now += 1.0
    for field in fields_with(Cadence.STATIC):
        assert backend.reads[field] == 1, field
    for field in fields_with(Cadence.FAST):
        assert backend.reads[field] == 21, field
    for field in fields_with(Cadence.SLOW):
        if field != "energy_joules":
            assert backend.reads[field] == 2, field  # t = 0 and t = 15
    # the captured busy GPU has a compute process: its energy counter is read every fast tick
    assert backend.reads["energy_joules"] == 21
    assert backend.process_reads == 21
    assert set(backend.reads) == set(FIELDS)


@pytest.mark.parametrize(
    ("processes", "measuring", "energy_fast", "reads"),
    [
        # no work: t = 0 and 1 (does the counter move at all?), then with the slow fields (15)
        (False, False, True, 3),
        (False, True, True, 21),  # a run in progress (no CUDA context yet): every fast tick
        (True, False, True, 21),  # a compute process on the GPU: every fast tick
        (True, True, False, 3),  # power integration chosen: the counter stays slow
    ],
)
def test_the_energy_counter_is_read_every_fast_tick_only_on_a_gpu_with_work(
    processes: bool, measuring: bool, energy_fast: bool, reads: int
) -> None:
    backend = CountingBackend(snapshot("h200-busy-full.json"))
    if not processes:
        backend.processes = []
    clock = Clock()
    source = GpuSource(backend, busy=lambda: measuring, energy_fast=energy_fast, clock=clock)
    sampler = Sampler([source], 1.0, 15.0, clock=clock)
    for _ in range(21):
        sampler.tick()
        clock.now += 1.0
    assert backend.reads["energy_joules"] == reads


def test_a_failing_read_drops_that_field_counts_an_error_and_stops_the_age() -> None:
    data = snapshot("h200-busy-full.json")
    backend = CountingBackend(data, failing=frozenset({"power_watts"}))
    _, registry, sampler = sampled(backend)
    fields = data["devices"][0]["fields"]
    gpu = {"gpu": "0", "uuid": fields["uuid"]}
    assert registry.get_sample_value("tunelab_gpu_power_watts", gpu) is None
    temperature = registry.get_sample_value("tunelab_gpu_temperature_celsius", gpu)
    assert temperature == fields["temperature_celsius"] == 61
    assert sampler.stats()[("gpu", Cadence.FAST)].errors == 1
    assert sampler.age("gpu", Cadence.FAST) is None  # never a complete fast cycle
    assert sampler.age("gpu", Cadence.SLOW) == 0.0


def test_a_host_without_gpus_samples_nothing_and_exports_nothing() -> None:
    source, registry, sampler = sampled(NoGpuBackend("no NVIDIA driver"))
    assert not source.enabled
    assert list(registry.collect()) == []
    assert sampler.stats() == {}


def test_describe_declares_every_family_collect_yields_and_no_created_series() -> None:
    source, registry, _ = sampled(SnapshotBackend(snapshot("h200-busy-full.json")))
    collector = GpuCollector(source)
    described = {m.name for m in collector.describe()}
    collected = {m.name for m in collector.collect()}
    assert collected <= described
    assert "_created" not in generate_latest(registry).decode()
    series = [s for m in registry.collect() for s in m.samples]
    for sample in series:
        if sample.name != "tunelab_gpu_info":
            assert set(sample.labels) <= {"gpu", "uuid", "reason", "severity"}, sample


def test_memory_used_is_nvidia_smis_and_the_reservation_is_its_own_series() -> None:
    for name, used in (("h200-idle-v2.json", 0), ("h200-busy-v2.json", 9610002432)):
        data = snapshot(name)  # captured with NVML v2 on the H200 (nvidia-smi: 616 MiB reserved)
        _, registry, _ = sampled(SnapshotBackend(data))
        gpu = {"gpu": "0", "uuid": data["devices"][0]["fields"]["uuid"]}
        assert registry.get_sample_value("tunelab_gpu_memory_used_bytes", gpu) == used
        assert registry.get_sample_value("tunelab_gpu_memory_reserved_bytes", gpu) == 644939776
    _, registry, _ = sampled(SnapshotBackend(snapshot("h200-idle-full.json")))  # v1-era capture
    names = {m.name for m in registry.collect()}
    assert "tunelab_gpu_memory_used_bytes" in names
    assert "tunelab_gpu_memory_reserved_bytes" not in names  # absent: used includes it
