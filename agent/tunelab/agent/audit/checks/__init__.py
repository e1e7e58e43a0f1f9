"""The catalogue: every check's stable id, its title and its function, in report order."""

from __future__ import annotations

from tunelab.agent.audit.checks import (
    cpu,
    cuda,
    gpu,
    irq,
    kernel,
    lxc,
    net,
    numa,
    pcie,
    pcielink,
    pve,
)
from tunelab.agent.audit.model import Check

CHECKS: tuple[Check, ...] = (
    Check("cpu.governor", "CPU frequency governor is performance on every CPU", cpu.governor),
    Check("cpu.epp", "Energy/performance preference is performance", cpu.epp),
    Check("cpu.boost", "Turbo/boost is enabled", cpu.boost),
    Check("cpu.cstates", "Worst-case C-state exit latency is bounded", cpu.cstates),
    Check("numa.balancing", "Automatic NUMA balancing is off", numa.balancing),
    Check("numa.gpu_locality", "Each GPU's NUMA node and local CPUs", numa.gpu_locality),
    Check("irq.gpu_affinity", "GPU interrupts spread near the GPU (irqbalance)", irq.irqbalance),
    Check("pcie.max_read_request", "GPU PCIe MaxReadReq", pcie.max_read_request),
    Check("pcie.max_payload", "PCIe MaxPayload is consistent to the root port", pcie.max_payload),
    Check(
        "pcie.link_width",
        "PCIe links run at full width, no narrower port above a GPU",
        pcielink.link_width,
    ),
    Check(
        "pcie.link_speed",
        "PCIe links run at full speed under load, no slower port above a GPU",
        pcielink.link_speed,
    ),
    Check("pcie.acs", "ACS is off on bridges above GPUs", pcie.acs),
    Check("iommu.mode", "IOMMU is off or in passthrough for GPUs", kernel.iommu_mode),
    Check("mem.thp", "Transparent huge pages do not compact synchronously", kernel.thp),
    Check("mem.swap", "No swap, or low swappiness", kernel.swap),
    Check("kernel.nvidia_module", "NVIDIA module loaded for this kernel", kernel.nvidia_module),
    Check("gpu.driver", "NVIDIA driver supports the GPUs", gpu.driver),
    Check("gpu.persistence", "Persistence mode is on", gpu.persistence, needs_nvml=True),
    Check("gpu.power_limit", "Power limit is the default", gpu.power_limit, needs_nvml=True),
    Check(
        "gpu.clock_events",
        "No thermal or power-brake throttling",
        gpu.clock_events,
        needs_nvml=True,
    ),
    Check("gpu.ecc", "ECC on with no uncorrected errors", gpu.ecc, needs_nvml=True),
    Check("gpu.stale_state", "No GPU busy without a process", gpu.stale_state, needs_nvml=True),
    Check("gpu.cuda_init", "CUDA initialises (cuInit in a child process)", cuda.cuda_init),
    Check(
        "gpu.fabric_manager",
        "NVSwitch fabric up (nvidia-fabricmanager)",
        cuda.fabric_manager,
    ),
    Check("net.port_range", "Agent and engine ports safe from the ephemeral range", net.port_range),
    Check("lxc.device_nodes", "Container's NVIDIA nodes match the live majors", lxc.device_nodes),
    Check("lxc.device_access", "Container's NVIDIA nodes open", lxc.device_access),
    Check(
        "pve.lxc_device_rules",
        "Proxmox container rules match the live majors",
        pve.lxc_device_rules,
    ),
)
CHECK_IDS: tuple[str, ...] = tuple(check.id for check in CHECKS)
