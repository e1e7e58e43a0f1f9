"""The FIELDS added for metrics, read through a fake pynvml that answers like the H200 did."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import pynvml
import pytest

from tunelab.agent.gpu import FIELDS, Cadence, NvmlBackend

# What nvmlDeviceGetFieldValues returned on the H200 (driver 580.159.04) for these ids, busy:
# 74 = power-cap time (ns), 269-271 thermal / power-brake slowdown time, 251 unsupported there.
FIELD_VALUES = {74: (0, 4942882688), 76: (0, 0), 269: (0, 0), 270: (0, 0), 271: (0, 0), 251: (3, 0)}


class FieldValue:
    def __init__(self, field_id: int) -> None:
        ret, value = FIELD_VALUES[field_id]
        self.fieldId = field_id
        self.nvmlReturn = ret
        self.value = types.SimpleNamespace(ullVal=value)


def fake_nvml(**functions: Any) -> Any:
    """pynvml's constants and exception classes, with the device calls replaced."""
    names = {k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith("NVML")}
    return types.SimpleNamespace(**names, **functions)


def backend_over(nvml: Any) -> NvmlBackend:
    backend = NvmlBackend.__new__(NvmlBackend)
    backend._nvml = nvml
    backend._handles = ["handle-0"]
    backend._reason = ""
    return backend


def field_values(handle: str, ids: Sequence[int]) -> list[FieldValue]:
    return [FieldValue(i) for i in ids]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("clock_event_sw_power_cap_seconds", 4.942882688),
        ("clock_event_sync_boost_seconds", 0.0),
        ("clock_event_sw_thermal_slowdown_seconds", 0.0),
        ("clock_event_hw_thermal_slowdown_seconds", 0.0),
        ("clock_event_hw_power_brake_slowdown_seconds", 0.0),
    ],
)
def test_clock_event_counters_are_field_values_in_seconds(field: str, expected: float) -> None:
    backend = backend_over(fake_nvml(nvmlDeviceGetFieldValues=field_values))
    assert backend.read(0, field) == pytest.approx(expected)
    assert FIELDS[field].cadence is Cadence.SLOW


def test_a_field_value_the_driver_does_not_support_reads_as_none() -> None:
    def unsupported(handle: str, ids: Sequence[int]) -> list[FieldValue]:
        return [FieldValue(251) for _ in ids]  # nvmlReturn 3 = NVML_ERROR_NOT_SUPPORTED

    backend = backend_over(fake_nvml(nvmlDeviceGetFieldValues=unsupported))
    assert backend.read(0, "clock_event_sw_thermal_slowdown_seconds") is None


def test_pcie_replays_read_the_replay_counter() -> None:
    backend = backend_over(fake_nvml(nvmlDeviceGetPcieReplayCounter=lambda handle: 7))
    assert backend.read(0, "pcie_replay_count") == 7
    assert FIELDS["pcie_replay_count"].cadence is Cadence.SLOW


class MemoryV2:
    """nvmlMemory_v2 as the idle H200 answered (run 1): used 0, reserved 615 MiB."""

    total, reserved, used, free = 150754820096, 644939776, 0, 150109880320


class MemoryV1:
    total, used, free = 150754820096, 644939776, 150109880320


def test_memory_used_is_v2s_and_reserved_is_its_own_field() -> None:
    def info(handle: str, version: int | None = None) -> object:
        return MemoryV2() if version else MemoryV1()

    backend = backend_over(
        fake_nvml(nvmlDeviceGetMemoryInfo=info, nvmlMemory_v2=pynvml.nvmlMemory_v2)
    )
    assert backend.read(0, "memory_used_bytes") == 0  # what nvidia-smi says: Used 0 MiB
    assert backend.read(0, "memory_reserved_bytes") == 644939776  # Reserved 615 MiB


def test_without_v2_used_falls_back_to_v1_and_reserved_is_absent() -> None:
    def info(handle: str, version: int | None = None) -> object:
        if version:
            raise pynvml.NVMLError_FunctionNotFound(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return MemoryV1()

    backend = backend_over(
        fake_nvml(nvmlDeviceGetMemoryInfo=info, nvmlMemory_v2=pynvml.nvmlMemory_v2)
    )
    assert backend.read(0, "memory_used_bytes") == 644939776
    assert backend.read(0, "memory_reserved_bytes") is None


def test_fabric_state_reads_nvml_fabric_info_and_is_absent_without_nvswitch() -> None:
    def completed(handle: str, info: Any) -> int:
        info._obj.state, info._obj.status = 3, 0
        return 0

    def unsupported(handle: str, info: Any) -> int:
        raise pynvml.NVMLError_NotSupported(pynvml.NVML_ERROR_NOT_SUPPORTED)

    nvml = fake_nvml(
        nvmlDeviceGetGpuFabricInfo=completed, c_nvmlGpuFabricInfo_t=pynvml.c_nvmlGpuFabricInfo_t
    )
    assert backend_over(nvml).read(0, "fabric_state") == 3
    nvml = fake_nvml(
        nvmlDeviceGetGpuFabricInfo=unsupported, c_nvmlGpuFabricInfo_t=pynvml.c_nvmlGpuFabricInfo_t
    )
    assert backend_over(nvml).read(0, "fabric_state") is None  # the H200 VM: N/A
