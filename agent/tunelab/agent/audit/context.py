"""Everything a check may look at, built once per audit and shared (lazily) by all checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from tunelab.agent.audit import cudaprobe, devnodes
from tunelab.agent.audit.cudaprobe import ProbeResult
from tunelab.agent.audit.environment import Environment, detect
from tunelab.agent.audit.model import Finding, skip
from tunelab.agent.audit.pcitopo import PciTree, normalize_bus_id
from tunelab.agent.gpu import FieldValue, GpuBackend, GpuError
from tunelab.agent.system import System

# Why NVML checks SKIP when the files come from a capture and the GPUs would be read live.
NO_SNAPSHOT_FOR_CAPTURE = (
    "reads the live GPUs: judging a captured root needs an NVML snapshot (--nvml-snapshot)"
)


@dataclass(frozen=True)
class AuditOptions:
    """Thresholds a site may want to change; defaults are the issue's."""

    cstate_max_latency_us: int = 100
    max_read_request: int = 4096
    busy_utilization: float = 0.05  # a GPU at or above this is "under load" for link speed
    stale_utilization: float = 0.5  # this busy with no process and no memory: stale state
    driver_reserved_bytes: int = 1 << 30  # NVML v1 only: what it reports used on an idle GPU
    stale_used_bytes: int = 256 << 20  # NVML v2: memory used with no process still "no work"
    cuda_probe_timeout: float = 20.0  # cuInit in a child; a hung driver costs the child
    # fixed ports that must not be taken as ephemeral source ports (net.port_range)
    agent_ports: tuple[tuple[int, str], ...] = (
        (50051, "agent gRPC default"),
        (9473, "agent metrics default"),
        (8000, "vLLM default"),
        (30000, "SGLang default"),
    )
    min_ephemeral_ports: int = 10000  # below this the load generator's connections run short


class AuditContext:
    """A host view: ``system`` (files under a root) and ``gpu`` (NVML, or None with a reason)."""

    def __init__(
        self,
        system: System,
        gpu: GpuBackend | None,
        gpu_skip_reason: str = "",
        options: AuditOptions | None = None,
        cuda_probe: Callable[[float], ProbeResult] = cudaprobe.probe,
    ) -> None:
        self.system = system
        self.gpu = gpu
        self.gpu_skip_reason = gpu_skip_reason
        self.options = options or AuditOptions()
        self._cuda_probe = cuda_probe

    @cached_property
    def cuda_init(self) -> ProbeResult | None:
        """cuInit in a child on the live host; a captured tree's recorded answer; else None."""
        if self.system.is_live:
            return self._cuda_probe(self.options.cuda_probe_timeout)
        recorded = self.system.capture_record(cudaprobe.RECORD)
        return ProbeResult.from_json(recorded) if isinstance(recorded, dict) else None

    @cached_property
    def processes(self) -> dict[int, str]:
        return self.system.process_names()

    @cached_property
    def environment(self) -> Environment:
        return detect(self.system)

    @cached_property
    def pci(self) -> PciTree:
        return PciTree(self.system)

    @cached_property
    def majors(self) -> dict[str, int] | None:
        return devnodes.char_majors(self.system)

    @cached_property
    def cmdline(self) -> str:
        return self.system.read_line("/proc/cmdline") or ""

    @cached_property
    def kernel_release(self) -> str:
        return self.system.read_line("/proc/sys/kernel/osrelease") or ""

    # --- NVML --------------------------------------------------------------------------------

    def nvml_skip(self) -> Finding | None:
        """A SKIP finding when NVML cannot be asked here, else None."""
        if self.gpu is None:
            return skip(self.gpu_skip_reason or "NVML not consulted")
        if not self.gpu.available():
            return skip(self.gpu.unavailable_reason() or "NVML unavailable")
        if self.gpu.device_count() == 0:
            return skip("NVML reports no GPU")
        return None

    def nvml_read(self, index: int, field: str) -> FieldValue:
        if self.gpu is None:
            return None
        return self.gpu.read(index, field)

    @cached_property
    def nvml_index_by_bdf(self) -> dict[str, int]:
        if self.nvml_skip() is not None or self.gpu is None:
            return {}
        found: dict[str, int] = {}
        for index in range(self.gpu.device_count()):
            bus_id = self.gpu.read(index, "pci_bus_id")
            if isinstance(bus_id, str):
                found[normalize_bus_id(bus_id)] = index
        return found

    def gpu_busy(self, bdf: str) -> bool | None:
        """True/False from NVML utilisation; None when NVML cannot say."""
        index = self.nvml_index_by_bdf.get(bdf)
        if index is None:
            return None
        try:
            util = self.nvml_read(index, "utilization_ratio")
        except GpuError:
            return None
        if not isinstance(util, int | float):
            return None
        return float(util) >= self.options.busy_utilization

    def gpu_label(self, index: int) -> str:
        bus_id = self.nvml_read(index, "pci_bus_id")
        return (
            f"GPU {index} ({normalize_bus_id(bus_id)})"
            if isinstance(bus_id, str)
            else f"GPU {index}"
        )
