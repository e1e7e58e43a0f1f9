"""Kernel-wide checks: IOMMU mode, transparent huge pages, swap, and the NVIDIA kernel module."""

from __future__ import annotations

import re

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Finding, Remediation, Status, ev, skip
from tunelab.agent.gpu import GpuError

THP = "/sys/kernel/mm/transparent_hugepage"
DRIVER_VERSION = "/proc/driver/nvidia/version"
_NVRM = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")
_SELECTED = re.compile(r"\[([^\]]+)\]")
# Where distributions and DKMS install nvidia.ko for a kernel release.
MODULE_DIRS = ("updates/dkms", "kernel/drivers/video", "extra", "updates", "kernel/nvidia")


def parse_nvrm(text: str | None) -> tuple[str | None, bool]:
    """``/proc/driver/nvidia/version`` → (version, open kernel module?)."""
    if not text:
        return None, False
    match = _NVRM.search(text)
    return (match.group(1) if match else None), "Open Kernel Module" in text


def iommu_mode(ctx: AuditContext) -> Finding:
    groups = ctx.system.listdir("/sys/kernel/iommu_groups")
    evidence = [ev("/proc/cmdline", ctx.cmdline), ev("/sys/kernel/iommu_groups", len(groups))]
    if not groups:
        return Finding(Status.PASS, "IOMMU off (no IOMMU groups)", "off or passthrough", evidence)
    gpus = ctx.pci.gpus
    if not gpus:
        return skip("no NVIDIA GPU on the PCI bus", evidence)
    translated: list[str] = []
    modes: list[str] = []
    for gpu in gpus:
        link = ctx.system.readlink(f"{gpu.sysfs}/iommu_group")
        group = link.rsplit("/", 1)[-1] if link else None
        kind = ctx.system.read_line(f"/sys/kernel/iommu_groups/{group}/type") if group else None
        evidence.append(ev(f"/sys/kernel/iommu_groups/{group}/type ({gpu.bdf})", kind))
        modes.append(f"{gpu.bdf} group {group} {kind}")
        if kind is not None and kind.startswith("DMA"):
            translated.append(gpu.bdf)
    if not translated:
        return Finding(Status.PASS, "; ".join(modes), "identity (iommu=pt) or off", evidence)
    return Finding(
        Status.WARN,
        f"DMA translation on {', '.join(translated)}: every GPU DMA and P2P transfer is "
        "remapped by the IOMMU",
        "identity (iommu=pt) or off",
        evidence,
        Remediation(
            persistent="add iommu=pt (Intel: intel_iommu=on iommu=pt) to the kernel command "
            "line (update-grub or proxmox-boot-tool refresh)",
            reboot_required=True,
        ),
    )


def thp(ctx: AuditContext) -> Finding:
    enabled = ctx.system.read_line(f"{THP}/enabled")
    defrag = ctx.system.read_line(f"{THP}/defrag")
    evidence = [ev(f"{THP}/enabled", enabled), ev(f"{THP}/defrag", defrag)]
    if enabled is None:
        return skip("kernel without transparent huge pages", evidence)
    mode = m.group(1) if (m := _SELECTED.search(enabled)) else enabled
    defrag_mode = m.group(1) if defrag and (m := _SELECTED.search(defrag)) else defrag
    observed = f"enabled={mode} defrag={defrag_mode}"
    if defrag_mode == "always":
        return Finding(
            Status.WARN,
            observed + ": page faults compact memory synchronously (latency spikes)",
            "defrag madvise, defer or never",
            evidence,
            Remediation(
                command=f"echo madvise > {THP}/defrag",
                persistent="w /sys/kernel/mm/transparent_hugepage/defrag - - - - madvise "
                "in /etc/tmpfiles.d/thp.conf",
            ),
        )
    return Finding(
        Status.PASS, observed, "defrag not 'always' (enabled is a benchmark choice)", evidence
    )


def swap(ctx: AuditContext) -> Finding:
    text = ctx.system.read_text("/proc/swaps")
    swappiness = ctx.system.read_int("/proc/sys/vm/swappiness")
    if text is None:
        return skip("/proc/swaps unreadable")
    devices = [line.split()[0] for line in text.splitlines()[1:] if line.split()]
    evidence = [
        ev("/proc/swaps", ", ".join(devices) or "none"),
        ev("/proc/sys/vm/swappiness", swappiness),
    ]
    if not devices:
        return Finding(Status.PASS, "no swap", "no swap, or swappiness <= 10", evidence)
    observed = f"swap on {', '.join(devices)}, swappiness {swappiness}"
    if swappiness is not None and swappiness <= 10:
        return Finding(Status.PASS, observed, "no swap, or swappiness <= 10", evidence)
    return Finding(
        Status.WARN,
        observed + ": model and KV-cache host memory can be paged out",
        "no swap, or swappiness <= 10",
        evidence,
        Remediation(
            command="sysctl -w vm.swappiness=10",
            persistent="echo vm.swappiness=10 > /etc/sysctl.d/90-tunelab.conf (or swapoff and "
            "remove the swap entry from /etc/fstab)",
        ),
    )


def _module_files(ctx: AuditContext, release: str) -> list[str]:
    found = []
    for sub in MODULE_DIRS:
        base = f"/lib/modules/{release}/{sub}"
        found += [f"{base}/{n}" for n in ctx.system.listdir(base) if n.startswith("nvidia.ko")]
    return found


def nvidia_module(ctx: AuditContext) -> Finding:
    release = ctx.kernel_release
    modules = {
        line.split()[0]
        for line in (ctx.system.read_text("/proc/modules") or "").splitlines()
        if line
    }
    versions = {
        name: ctx.system.read_line(f"/sys/module/{name}/version")
        for name in ("nvidia", "nvidia_uvm")
    }
    nvrm, is_open = parse_nvrm(ctx.system.read_text(DRIVER_VERSION))
    evidence = [
        ev("/proc/sys/kernel/osrelease", release),
        ev("/proc/modules", ", ".join(sorted(m for m in modules if m.startswith("nvidia")))),
        *(ev(f"/sys/module/{n}/version", v) for n, v in versions.items()),
        ev(DRIVER_VERSION, nvrm),
    ]
    userspace = None
    if ctx.nvml_skip() is None and ctx.gpu is not None:
        try:
            userspace = ctx.gpu.system().get("driver_version")
        except GpuError as exc:
            evidence.append(ev("nvml driver_version", f"error: {exc}"))
        else:
            evidence.append(ev("nvml driver_version", userspace))
    loaded = "nvidia" in modules or versions["nvidia"] is not None
    if not loaded:
        if not ctx.pci.gpus:
            return skip("no NVIDIA GPU on the PCI bus and no nvidia module", evidence)
        files = _module_files(ctx, release)
        evidence.append(ev(f"/lib/modules/{release}/.../nvidia.ko*", ", ".join(files) or "none"))
        why = "built but not loaded" if files else f"no nvidia module built for kernel {release}"
        return Finding(
            Status.FAIL,
            f"nvidia module not loaded ({why})",
            f"an nvidia module loaded for kernel {release}",
            evidence,
            Remediation(
                command="modprobe nvidia"
                if files
                else f"dkms autoinstall -k {release} && modprobe nvidia",
                persistent="keep the driver's DKMS package installed, or pin the previous kernel "
                "until the driver builds (proxmox-boot-tool kernel pin)",
            ),
        )
    seen = {k: v for k, v in {**versions, "NVRM": nvrm, "userspace": userspace}.items() if v}
    distinct = sorted({str(v) for v in seen.values()})
    flavor = "open" if is_open else "proprietary"
    if len(distinct) > 1:
        return Finding(
            Status.FAIL,
            "driver versions differ: " + ", ".join(f"{k} {v}" for k, v in seen.items()),
            "one version for nvidia, nvidia_uvm and the userspace driver",
            evidence,
            Remediation(
                persistent="reinstall one driver version for kernel and userspace, then reboot "
                "(a container's userspace libraries must match the host's module)",
                reboot_required=True,
            ),
        )
    version = distinct[0] if distinct else "unknown version"
    if "nvidia_uvm" not in modules and versions["nvidia_uvm"] is None:
        return Finding(
            Status.WARN,
            f"nvidia {version} ({flavor}) loaded for {release}, nvidia_uvm not loaded: CUDA "
            "needs it",
            "nvidia and nvidia_uvm loaded",
            evidence,
            Remediation(
                command="nvidia-modprobe -u -c0",
                persistent="load nvidia_uvm at boot: "
                "echo nvidia_uvm > /etc/modules-load.d/nvidia.conf",
            ),
        )
    return Finding(
        Status.PASS,
        f"nvidia {version} ({flavor}) loaded for {release}; "
        f"nvidia_uvm {versions['nvidia_uvm'] or 'loaded'}",
        "the module for the running kernel, one version everywhere",
        evidence,
    )
