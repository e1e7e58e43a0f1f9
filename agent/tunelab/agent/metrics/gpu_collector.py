"""GPU metric families, rendered from the sampler's latest :class:`GpuSample`.

Per-GPU series carry only ``gpu`` (NVML index) and ``uuid``; everything descriptive sits on
``tunelab_gpu_info``. Values are already in base units (``tunelab.agent.gpu`` converts them).
Fields the GPU does not support are absent. Values are as fresh as their cadence: see
``tunelab_agent_sample_age_seconds{source="gpu"}``. The energy counter is not here: it is
served live by ``metrics.energy``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric

from tunelab.agent.gpu import CLOCK_EVENT_REASONS, FieldValue
from tunelab.agent.metrics.families import Family, FamilyCollector, counter, gauge, info
from tunelab.agent.metrics.gpu_source import GpuSource

GPU = ("gpu", "uuid")
INFO_LABELS = (
    "name",
    "pci_bus_id",
    "driver_version",
    "cuda_driver_version",
    "vbios_version",
    "compute_capability",
    "numa_node",
)

# (family, agent.gpu field): one series per GPU, value straight from the field.
FIELD_FAMILIES: tuple[tuple[Family, str], ...] = (
    (gauge("tunelab_gpu_utilization_ratio", "Time a kernel ran, 0-1.", *GPU), "utilization_ratio"),
    (
        gauge("tunelab_gpu_memory_utilization_ratio", "Memory controller busy, 0-1.", *GPU),
        "memory_utilization_ratio",
    ),
    (
        gauge(
            "tunelab_gpu_memory_used_bytes",
            "Framebuffer in use, as nvidia-smi's Used (NVML v2: the driver's reservation is not "
            "in it; without v2 it is, and memory_reserved is absent).",
            *GPU,
        ),
        "memory_used_bytes",
    ),
    (
        gauge(
            "tunelab_gpu_memory_reserved_bytes",
            "Framebuffer the driver reserves for itself (nvidia-smi's Reserved).",
            *GPU,
        ),
        "memory_reserved_bytes",
    ),
    (gauge("tunelab_gpu_memory_total_bytes", "Framebuffer size.", *GPU), "memory_total_bytes"),
    (gauge("tunelab_gpu_power_watts", "Board power draw.", *GPU), "power_watts"),
    (
        gauge("tunelab_gpu_power_limit_watts", "Enforced power limit.", *GPU),
        "power_limit_watts",
    ),
    (
        gauge("tunelab_gpu_power_default_limit_watts", "Default power limit.", *GPU),
        "power_default_limit_watts",
    ),
    (
        gauge("tunelab_gpu_power_min_limit_watts", "Lowest settable power limit.", *GPU),
        "power_min_limit_watts",
    ),
    (
        gauge("tunelab_gpu_power_max_limit_watts", "Highest settable power limit.", *GPU),
        "power_max_limit_watts",
    ),
    (
        gauge("tunelab_gpu_temperature_celsius", "GPU core temperature.", *GPU),
        "temperature_celsius",
    ),
    (gauge("tunelab_gpu_sm_clock_hertz", "Current SM clock.", *GPU), "sm_clock_hertz"),
    (gauge("tunelab_gpu_sm_clock_max_hertz", "Maximum SM clock.", *GPU), "sm_clock_max_hertz"),
    (
        gauge("tunelab_gpu_memory_clock_hertz", "Current memory clock.", *GPU),
        "memory_clock_hertz",
    ),
    (
        gauge("tunelab_gpu_memory_clock_max_hertz", "Maximum memory clock.", *GPU),
        "memory_clock_max_hertz",
    ),
    (
        gauge("tunelab_gpu_performance_state", "P-state, 0 is fastest.", *GPU),
        "performance_state",
    ),
    (
        gauge("tunelab_gpu_pcie_link_generation", "Current PCIe link generation.", *GPU),
        "pcie_link_generation",
    ),
    (
        gauge("tunelab_gpu_pcie_link_max_generation", "Highest PCIe generation of the link.", *GPU),
        "pcie_link_generation_max",
    ),
    (
        gauge("tunelab_gpu_pcie_link_width", "Current PCIe link width (lanes).", *GPU),
        "pcie_link_width",
    ),
    (
        gauge("tunelab_gpu_pcie_link_max_width", "Widest PCIe width of the link (lanes).", *GPU),
        "pcie_link_width_max",
    ),
    (
        gauge(
            "tunelab_gpu_pcie_rx_bytes_per_second",
            "PCIe receive rate over a 20 ms window, read at the slow cadence.",
            *GPU,
        ),
        "pcie_rx_bytes_per_second",
    ),
    (
        gauge(
            "tunelab_gpu_pcie_tx_bytes_per_second",
            "PCIe transmit rate over a 20 ms window, read at the slow cadence.",
            *GPU,
        ),
        "pcie_tx_bytes_per_second",
    ),
    (
        counter("tunelab_gpu_pcie_replays_total", "PCIe link replays since boot.", *GPU),
        "pcie_replay_count",
    ),
    (
        gauge("tunelab_gpu_persistence_mode", "1 when persistence mode is on.", *GPU),
        "persistence_mode",
    ),
    (gauge("tunelab_gpu_ecc_mode", "1 when ECC is enabled.", *GPU), "ecc_mode"),
)

# Cumulative throttle time per reason; the reason names are those of clock_event_active.
CLOCK_EVENT_SECONDS: tuple[tuple[str, str], ...] = (
    ("sw_power_cap", "clock_event_sw_power_cap_seconds"),
    ("sync_boost", "clock_event_sync_boost_seconds"),
    ("sw_thermal_slowdown", "clock_event_sw_thermal_slowdown_seconds"),
    ("hw_thermal_slowdown", "clock_event_hw_thermal_slowdown_seconds"),
    ("hw_power_brake_slowdown", "clock_event_hw_power_brake_slowdown_seconds"),
)

# (severity, volatile field, aggregate field)
ECC_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("corrected", "ecc_corrected_volatile", "ecc_corrected_aggregate"),
    ("uncorrected", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"),
)

INFO = info(
    "tunelab_gpu_info", "GPU identity; join on gpu/uuid for names and versions.", *GPU, *INFO_LABELS
)
CLOCK_EVENT_ACTIVE = gauge(
    "tunelab_gpu_clock_event_active",
    "1 while clocks are held down for this reason (throttling), sampled at the fast cadence.",
    *GPU,
    "reason",
)
CLOCK_EVENT_TOTAL = counter(
    "tunelab_gpu_clock_event_seconds_total",
    "Time clocks were held down for this reason since the driver loaded.",
    *GPU,
    "reason",
)
ECC_VOLATILE = counter(
    "tunelab_gpu_ecc_errors_total", "ECC errors since the driver loaded.", *GPU, "severity"
)
ECC_AGGREGATE = counter(
    "tunelab_gpu_ecc_lifetime_errors_total", "ECC errors over the GPU's life.", *GPU, "severity"
)
PROCESSES = gauge("tunelab_gpu_compute_processes", "Compute processes on the GPU.", *GPU)
PROCESS_MEMORY = gauge(
    "tunelab_gpu_compute_process_memory_bytes",
    "GPU memory held by compute processes (per server: tunelab_server_gpu_memory_bytes).",
    *GPU,
)


class GpuCollector(FamilyCollector):
    families = (
        INFO,
        *(family for family, _ in FIELD_FAMILIES),
        CLOCK_EVENT_ACTIVE,
        CLOCK_EVENT_TOTAL,
        ECC_VOLATILE,
        ECC_AGGREGATE,
        PROCESSES,
        PROCESS_MEMORY,
    )

    def __init__(self, source: GpuSource) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        sample = self._source.latest
        out = self.samples()
        for index, fields in enumerate(sample.devices):
            ids = [str(index), _text(fields.get("uuid"))]
            out.add(INFO.name, [*ids, *_info_values(fields, sample.system)], 1)
            for family, name in FIELD_FAMILIES:
                out.add(family.name, ids, _number(fields.get(name)))
            mask = fields.get("clock_event_reasons")
            if isinstance(mask, int):
                for bit, reason in CLOCK_EVENT_REASONS.items():
                    out.add(CLOCK_EVENT_ACTIVE.name, [*ids, reason], 1 if mask & bit else 0)
            for reason, name in CLOCK_EVENT_SECONDS:
                out.add(CLOCK_EVENT_TOTAL.name, [*ids, reason], _number(fields.get(name)))
            for severity, volatile, aggregate in ECC_FIELDS:
                out.add(ECC_VOLATILE.name, [*ids, severity], _number(fields.get(volatile)))
                out.add(ECC_AGGREGATE.name, [*ids, severity], _number(fields.get(aggregate)))
            if self._source.enabled:
                mine = [p for p in sample.processes if p.gpu_index == index]
                out.add(PROCESSES.name, ids, len(mine))
                used = [p.used_memory_bytes for p in mine if p.used_memory_bytes is not None]
                out.add(PROCESS_MEMORY.name, ids, sum(used))
        return out.families()


def _info_values(fields: Mapping[str, FieldValue], system: Mapping[str, FieldValue]) -> list[str]:
    merged = {**system, **fields}
    return [_text(merged.get(name)) for name in INFO_LABELS]


def _text(value: FieldValue) -> str:
    """A label value; unsupported is the empty string, which Prometheus treats as no label."""
    return "" if value is None else str(value)


def _number(value: FieldValue) -> float | None:
    if value is None or isinstance(value, (str, list)):
        return None
    return float(value)
