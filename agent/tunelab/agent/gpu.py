"""The one module that talks to NVML.

Everything else sees GPUs through :class:`GpuBackend`: a set of named fields per device, each
already converted to base units (bytes, watts, hertz, joules, ratios), with ``None`` meaning
"this GPU does not support it" so callers export an absent series rather than a zero.

Two backends satisfy the protocol: :class:`NvmlBackend` (the live driver, through pynvml) and
:class:`SnapshotBackend`, which answers from a JSON snapshot captured on a real host by
:func:`capture_snapshot` (``benchmarks/capture_nvml.py``). Tests, ``audit --root`` and hosts
without a driver use the latter or :class:`NoGpuBackend`.

Errors::

    GpuError            an NVML call failed for a reason other than "not supported"
    └── GpuUnavailable  no driver / library here; GPU features are off
"""

from __future__ import annotations

import ctypes
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

# re-exported: the one table lives in tunelab.common, which the controller reads too
from tunelab.common.clockevents import CLOCK_EVENT_REASONS as CLOCK_EVENT_REASONS
from tunelab.common.clockevents import clock_event_names as clock_event_names

FieldValue = int | float | str | bool | list[int] | None


class GpuError(Exception):
    """An NVML call failed (GPU lost, driver reloaded, ...)."""


class GpuUnavailable(GpuError):
    """NVML cannot be used on this host at all."""


class Cadence(StrEnum):
    """How often a field is worth reading: cost and rate of change decide."""

    STATIC = "static"  # read once at start
    FAST = "fast"  # cheap (a few µs): every sampler tick (default 1 s)
    SLOW = "slow"  # costly (ms) or slowly changing: every slow tick (default 15 s)


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding a context on a GPU."""

    gpu_index: int
    uuid: str
    pid: int
    used_memory_bytes: int | None


class GpuBackend(Protocol):
    """Read-only view of the host's GPUs."""

    def available(self) -> bool:
        """True when GPU fields can be read at all."""
        ...

    def unavailable_reason(self) -> str:
        """Why :meth:`available` is False (empty otherwise)."""
        ...

    def system(self) -> dict[str, FieldValue]:
        """Host-wide facts: driver_version, cuda_driver_version, nvml_version."""
        ...

    def device_count(self) -> int: ...

    def read(self, index: int, field: str) -> FieldValue:
        """One field of one GPU in base units; None when the GPU does not support it."""
        ...

    def compute_processes(self) -> list[GpuProcess]:
        """Every compute process on every GPU."""
        ...


# --- the live backend ------------------------------------------------------------------------


def _mw_to_w(value: int) -> float:
    return value / 1000.0


def _mhz_to_hz(value: int) -> int:
    return int(value) * 1_000_000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class FieldSpec:
    """How to read one field through pynvml, and how often."""

    cadence: Cadence
    read: Callable[[Any, Any], FieldValue]  # (pynvml module, device handle) -> value in base units
    help: str


def _fields() -> dict[str, FieldSpec]:
    s, f, w = Cadence.STATIC, Cadence.FAST, Cadence.SLOW

    def ecc(kind: str, counter: str) -> Callable[[Any, Any], FieldValue]:
        def read(n: Any, h: Any) -> FieldValue:
            error_type = getattr(n, f"NVML_MEMORY_ERROR_TYPE_{kind}")
            counter_type = getattr(n, f"NVML_{counter}_ECC")
            return int(n.nvmlDeviceGetTotalEccErrors(h, error_type, counter_type))

        return read

    def field_ns_to_s(field_id: int) -> Callable[[Any, Any], FieldValue]:
        # One nvmlDeviceGetFieldValues entry holding a nanosecond counter; each entry carries
        # its own return code, which is turned back into the exception the caller maps.
        def read(n: Any, h: Any) -> FieldValue:
            value = n.nvmlDeviceGetFieldValues(h, [field_id])[0]
            if value.nvmlReturn != n.NVML_SUCCESS:
                raise n.NVMLError(value.nvmlReturn)
            return int(value.value.ullVal) / 1e9

        return read

    def pcie(kind: str) -> Callable[[Any, Any], FieldValue]:
        # KB/s over a 20 ms window; this call blocks ~20 ms, so it is SLOW by construction.
        return lambda n, h: int(
            n.nvmlDeviceGetPcieThroughput(h, getattr(n, f"NVML_PCIE_UTIL_{kind}_BYTES")) * 1000
        )

    return {
        "name": FieldSpec(s, lambda n, h: _text(n.nvmlDeviceGetName(h)), "product name"),
        "uuid": FieldSpec(s, lambda n, h: _text(n.nvmlDeviceGetUUID(h)), "GPU UUID"),
        "pci_bus_id": FieldSpec(
            s, lambda n, h: _text(n.nvmlDeviceGetPciInfo(h).busId).lower(), "PCI bus id"
        ),
        "minor_number": FieldSpec(
            s, lambda n, h: int(n.nvmlDeviceGetMinorNumber(h)), "/dev/nvidiaN"
        ),
        "vbios_version": FieldSpec(s, lambda n, h: _text(n.nvmlDeviceGetVbiosVersion(h)), "VBIOS"),
        "compute_capability": FieldSpec(
            s,
            lambda n, h: "{}.{}".format(*n.nvmlDeviceGetCudaComputeCapability(h)),
            "CUDA compute capability",
        ),
        "numa_node": FieldSpec(s, lambda n, h: int(n.nvmlDeviceGetNumaNodeId(h)), "NUMA node"),
        "memory_total_bytes": FieldSpec(
            s, lambda n, h: int(n.nvmlDeviceGetMemoryInfo(h).total), "framebuffer size"
        ),
        "power_default_limit_watts": FieldSpec(
            s,
            lambda n, h: _mw_to_w(n.nvmlDeviceGetPowerManagementDefaultLimit(h)),
            "default power limit",
        ),
        "power_min_limit_watts": FieldSpec(
            s,
            lambda n, h: _mw_to_w(n.nvmlDeviceGetPowerManagementLimitConstraints(h)[0]),
            "min settable",
        ),
        "power_max_limit_watts": FieldSpec(
            s,
            lambda n, h: _mw_to_w(n.nvmlDeviceGetPowerManagementLimitConstraints(h)[1]),
            "max settable",
        ),
        "sm_clock_max_hertz": FieldSpec(
            s,
            lambda n, h: _mhz_to_hz(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
            "max SM clock",
        ),
        "memory_clock_max_hertz": FieldSpec(
            s,
            lambda n, h: _mhz_to_hz(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_MEM)),
            "max mem clock",
        ),
        "pcie_link_generation_max": FieldSpec(
            s, lambda n, h: int(n.nvmlDeviceGetMaxPcieLinkGeneration(h)), "link's max PCIe gen"
        ),
        "pcie_link_width_max": FieldSpec(
            s, lambda n, h: int(n.nvmlDeviceGetMaxPcieLinkWidth(h)), "link's max PCIe width"
        ),
        "utilization_ratio": FieldSpec(
            f, lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu / 100.0, "time a kernel ran"
        ),
        "memory_utilization_ratio": FieldSpec(
            f, lambda n, h: n.nvmlDeviceGetUtilizationRates(h).memory / 100.0, "mem controller busy"
        ),
        "memory_used_bytes": FieldSpec(
            f, lambda n, h: _memory_info(n, h)[0], "framebuffer used (nvidia-smi's Used)"
        ),
        "memory_reserved_bytes": FieldSpec(
            f, lambda n, h: _memory_info(n, h)[1], "framebuffer the driver reserves"
        ),
        "power_watts": FieldSpec(
            f, lambda n, h: _mw_to_w(n.nvmlDeviceGetPowerUsage(h)), "board power"
        ),
        "temperature_celsius": FieldSpec(
            f,
            lambda n, h: int(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            "GPU temperature",
        ),
        "sm_clock_hertz": FieldSpec(
            f, lambda n, h: _mhz_to_hz(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)), "SM clock"
        ),
        "memory_clock_hertz": FieldSpec(
            f,
            lambda n, h: _mhz_to_hz(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            "memory clock",
        ),
        "clock_event_reasons": FieldSpec(
            f, lambda n, h: int(n.nvmlDeviceGetCurrentClocksEventReasons(h)), "throttle bitmask"
        ),
        "performance_state": FieldSpec(
            f, lambda n, h: int(n.nvmlDeviceGetPerformanceState(h)), "P-state, 0 = fastest"
        ),
        "energy_joules": FieldSpec(
            w,
            lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,
            "energy since driver load",
        ),
        "power_limit_watts": FieldSpec(
            w, lambda n, h: _mw_to_w(n.nvmlDeviceGetEnforcedPowerLimit(h)), "enforced power limit"
        ),
        "pcie_link_generation": FieldSpec(
            w, lambda n, h: int(n.nvmlDeviceGetCurrPcieLinkGeneration(h)), "current PCIe gen"
        ),
        "pcie_link_width": FieldSpec(
            w, lambda n, h: int(n.nvmlDeviceGetCurrPcieLinkWidth(h)), "current PCIe width"
        ),
        "pcie_tx_bytes_per_second": FieldSpec(w, pcie("TX"), "PCIe transmit rate"),
        "pcie_rx_bytes_per_second": FieldSpec(w, pcie("RX"), "PCIe receive rate"),
        "persistence_mode": FieldSpec(
            w, lambda n, h: bool(n.nvmlDeviceGetPersistenceMode(h)), "persistence mode on"
        ),
        "ecc_mode": FieldSpec(w, lambda n, h: bool(n.nvmlDeviceGetEccMode(h)[0]), "ECC enabled"),
        "ecc_corrected_volatile": FieldSpec(w, ecc("CORRECTED", "VOLATILE"), "since boot"),
        "ecc_uncorrected_volatile": FieldSpec(w, ecc("UNCORRECTED", "VOLATILE"), "since boot"),
        "ecc_corrected_aggregate": FieldSpec(w, ecc("CORRECTED", "AGGREGATE"), "lifetime"),
        "ecc_uncorrected_aggregate": FieldSpec(w, ecc("UNCORRECTED", "AGGREGATE"), "lifetime"),
        "pcie_replay_count": FieldSpec(
            w, lambda n, h: int(n.nvmlDeviceGetPcieReplayCounter(h)), "PCIe replays since boot"
        ),
        # Cumulative time clocks were held down, per cause (field values, ns -> s). IDs are the
        # nvml.h 13.x ones: on the H200 (driver 580.159.04) 269-271 answer and the older
        # 251-253 are NOT_SUPPORTED (benchmarks/results/scrape_cost_nvml_probe.txt).
        "clock_event_sw_power_cap_seconds": FieldSpec(w, field_ns_to_s(74), "power cap time"),
        "clock_event_sync_boost_seconds": FieldSpec(w, field_ns_to_s(76), "sync boost time"),
        "clock_event_sw_thermal_slowdown_seconds": FieldSpec(
            w, field_ns_to_s(269), "software thermal slowdown time"
        ),
        "clock_event_hw_thermal_slowdown_seconds": FieldSpec(
            w, field_ns_to_s(270), "hardware thermal slowdown time"
        ),
        "clock_event_hw_power_brake_slowdown_seconds": FieldSpec(
            w, field_ns_to_s(271), "hardware power brake slowdown time"
        ),
        # host audit (gpu.fabric_manager): NVSwitch fabric registration, NOT_SUPPORTED elsewhere
        "fabric_state": FieldSpec(w, lambda n, h: _fabric_info(n, h)[0], "fabric state 0-3"),
        "fabric_status": FieldSpec(w, lambda n, h: _fabric_info(n, h)[1], "fabric nvmlReturn"),
        # host audit (gpu.ecc): ECC mode after the next reset, and the row remapper's state
        "ecc_mode_pending": FieldSpec(
            w, lambda n, h: bool(n.nvmlDeviceGetEccMode(h)[1]), "ECC after next reset"
        ),
        "remapped_rows_uncorrectable": FieldSpec(
            w, lambda n, h: int(n.nvmlDeviceGetRemappedRows(h)[1]), "rows remapped, uncorrectable"
        ),
        "remapped_rows_pending": FieldSpec(
            w, lambda n, h: bool(n.nvmlDeviceGetRemappedRows(h)[2]), "remap waits for a reset"
        ),
        "remapped_rows_failure": FieldSpec(
            w, lambda n, h: bool(n.nvmlDeviceGetRemappedRows(h)[3]), "remapping failed"
        ),
    }


def _memory_info(n: Any, h: Any) -> tuple[int, int | None]:
    """(used, reserved) as nvidia-smi shows them: NVML's v2 memory info.

    v1 (``nvmlDeviceGetMemoryInfo``) counts the driver's reservation (~615 MiB on an H200) as
    used, so an idle GPU looks occupied. A driver or pynvml without v2 falls back to v1's used,
    and reserved reads as None (absent): the series' absence says that used includes it.
    """
    version = getattr(n, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = n.nvmlDeviceGetMemoryInfo(h, version=version)
            return int(info.used), int(info.reserved)
        except (
            n.NVMLError_FunctionNotFound,
            n.NVMLError_NotSupported,
            getattr(n, "NVMLError_ArgumentVersionMismatch", n.NVMLError_NotSupported),
        ):
            pass
    return int(n.nvmlDeviceGetMemoryInfo(h).used), None


def _fabric_info(n: Any, h: Any) -> tuple[int, int]:
    """(state, status) of the GPU's NVSwitch fabric registration (nvmlGpuFabricInfo_t)."""
    info = n.c_nvmlGpuFabricInfo_t()
    n.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    return int(info.state), int(info.status)


# nvmlGpuFabricState_t
FABRIC_STATES = {0: "NOT_SUPPORTED", 1: "NOT_STARTED", 2: "IN_PROGRESS", 3: "COMPLETED"}

FIELDS: dict[str, FieldSpec] = _fields()


def fields_with(cadence: Cadence) -> list[str]:
    return [name for name, spec in FIELDS.items() if spec.cadence is cadence]


class NvmlBackend:
    """The live driver. Thread-safe: NVML is, and init/handles are guarded by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._reason = ""
        self._init()

    def _init(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py is a dependency; this is a broken install
            self._reason = f"pynvml not importable: {exc}"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            self._reason = f"NVML unavailable: {exc}"
            return
        self._nvml = pynvml

    def available(self) -> bool:
        return self._nvml is not None

    def unavailable_reason(self) -> str:
        return self._reason

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                self._nvml.nvmlShutdown()
                self._nvml = None
                self._reason = "NVML shut down"

    def _require(self) -> Any:
        if self._nvml is None:
            raise GpuUnavailable(self._reason or "NVML unavailable")
        return self._nvml

    def _call(self, fn: Callable[[], FieldValue]) -> FieldValue:
        n = self._require()
        try:
            return fn()
        except (n.NVMLError_NotSupported, n.NVMLError_FunctionNotFound, n.NVMLError_NoPermission):
            return None
        except n.NVMLError as exc:
            raise GpuError(str(exc)) from exc

    def system(self) -> dict[str, FieldValue]:
        n = self._require()

        def cuda() -> str:
            version = int(n.nvmlSystemGetCudaDriverVersion())
            return f"{version // 1000}.{(version % 1000) // 10}"

        return {
            "driver_version": self._call(lambda: _text(n.nvmlSystemGetDriverVersion())),
            "cuda_driver_version": self._call(cuda),
            "nvml_version": self._call(lambda: _text(n.nvmlSystemGetNVMLVersion())),
        }

    def device_count(self) -> int:
        return len(self._handles) if self._nvml is not None else 0

    def read(self, index: int, field: str) -> FieldValue:
        n = self._require()
        spec = FIELDS[field]
        handle = self._handles[index]
        return self._call(lambda: spec.read(n, handle))

    def compute_processes(self) -> list[GpuProcess]:
        n = self._require()
        found: list[GpuProcess] = []
        for index, handle in enumerate(self._handles):
            uuid = str(self.read(index, "uuid"))
            try:
                procs: list[Any] = n.nvmlDeviceGetComputeRunningProcesses(handle)
            except (n.NVMLError_NotSupported, n.NVMLError_NoPermission):
                continue
            except n.NVMLError as exc:
                raise GpuError(str(exc)) from exc
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                found.append(GpuProcess(index, uuid, int(proc.pid), int(used) if used else None))
        return found


# --- captured and absent GPUs ----------------------------------------------------------------


class NoGpuBackend:
    """A host without an NVIDIA driver: every GPU feature is off, with the reason."""

    def __init__(self, reason: str = "no NVIDIA GPU on this host") -> None:
        self._reason = reason

    def available(self) -> bool:
        return False

    def unavailable_reason(self) -> str:
        return self._reason

    def system(self) -> dict[str, FieldValue]:
        raise GpuUnavailable(self._reason)

    def device_count(self) -> int:
        return 0

    def read(self, index: int, field: str) -> FieldValue:
        raise GpuUnavailable(self._reason)

    def compute_processes(self) -> list[GpuProcess]:
        raise GpuUnavailable(self._reason)


# A captured process's pid names a process of the host it was captured on, never one here: the
# replay moves it above the kernel's PID_MAX_LIMIT (2^22). Kept as captured, it once named the
# demo's own simulator (pid 467 after the pids wrapped), whose stop then waited 60 s for NVML to
# let go of it and quarantined the host, and the demo waited for ever.
FOREIGN_PID_BASE = 1 << 22


class SnapshotBackend:
    """Answers from a snapshot captured on a real host (see :func:`capture_snapshot`).

    A field the snapshot lacks or holds as null reads as unsupported, exactly as the live GPU
    said. ``processes`` may be replaced by a test to model a server holding GPU memory.

    A snapshot is one instant, so its energy counter stands still. A snapshot that says
    ``"replay": {"energy_from_power": true}`` lets the counter grow at the captured power, as the
    GPU's own would, for tests that need energy per run (tokens per joule).
    """

    def __init__(
        self, snapshot: Mapping[str, Any], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._system = dict(snapshot.get("system", {}))
        self._devices: list[dict[str, Any]] = [dict(d["fields"]) for d in snapshot["devices"]]
        self._lock = threading.Lock()
        self.processes: list[GpuProcess] = [
            replace(GpuProcess(**p), pid=FOREIGN_PID_BASE + int(p["pid"]))
            for p in snapshot.get("processes", [])
        ]
        self._energy_from_power = bool(snapshot.get("replay", {}).get("energy_from_power"))
        self._clock = clock
        self._loaded_at = clock()

    @classmethod
    def load(cls, path: Path) -> SnapshotBackend:
        return cls(json.loads(path.read_text()))

    def available(self) -> bool:
        return True

    def unavailable_reason(self) -> str:
        return ""

    def system(self) -> dict[str, FieldValue]:
        return dict(self._system)

    def device_count(self) -> int:
        return len(self._devices)

    def read(self, index: int, field: str) -> FieldValue:
        if field not in FIELDS:
            raise KeyError(field)
        value: FieldValue = self._devices[index].get(field)
        if field == "energy_joules" and self._energy_from_power:
            energy, power = as_float(value), as_float(self._devices[index].get("power_watts"))
            if energy is not None and power is not None:
                return energy + power * (self._clock() - self._loaded_at)
        return value

    def set_field(self, index: int, field: str, value: FieldValue) -> None:
        """Let a test move a captured GPU into another state (busy, throttled, ...)."""
        with self._lock:
            self._devices[index][field] = value

    def compute_processes(self) -> list[GpuProcess]:
        with self._lock:
            return list(self.processes)


def open_backend(snapshot: Path | None = None) -> GpuBackend:
    """The live NVML backend, a captured snapshot, or NoGpuBackend with the reason."""
    if snapshot is not None:
        data = json.loads(snapshot.read_text())
        if data.get("unavailable"):  # captured on a host without NVML: replay that
            return NoGpuBackend(str(data["unavailable"]))
        return SnapshotBackend(data)
    live = NvmlBackend()
    if live.available():
        return live
    return NoGpuBackend(live.unavailable_reason())


def capture_snapshot(backend: GpuBackend, fields: Iterable[str] | None = None) -> dict[str, Any]:
    """Every field of every GPU, with per-field read cost, as JSON-ready data. A host without a
    usable NVML gets a snapshot too, holding the reason (``unavailable``), so a capture's replay
    (``--nvml-snapshot nvml.json``) works there and says the same."""
    if not backend.available():
        reason = backend.unavailable_reason()
        return {"captured_at": time.time(), "unavailable": reason, "system": {}, "devices": []}
    names = list(fields) if fields is not None else list(FIELDS)
    devices = []
    for index in range(backend.device_count()):
        values: dict[str, FieldValue] = {}
        cost_us: dict[str, float] = {}
        for name in names:
            start = time.perf_counter()
            values[name] = backend.read(index, name)
            cost_us[name] = round((time.perf_counter() - start) * 1e6, 1)
        devices.append({"index": index, "fields": values, "read_cost_us": cost_us})
    return {
        "captured_at": time.time(),
        "system": backend.system(),
        "devices": devices,
        "processes": [p.__dict__ for p in backend.compute_processes()],
    }


def as_int(value: FieldValue) -> int | None:
    """A numeric field as int (None stays None: unsupported)."""
    return int(value) if isinstance(value, int | float) else None


def as_float(value: FieldValue) -> float | None:
    """A numeric field as float (None stays None: unsupported)."""
    return float(value) if isinstance(value, int | float) else None
