"""CUDA beyond NVML: does ``cuInit`` work here, and does an NVSwitch host's fabric come up.

``nvidia-smi`` answering proves only that NVML reaches the driver. CUDA additionally needs
``/dev/nvidia-uvm`` (a container's device rules often miss it), a ``libcuda`` of the kernel
module's version, and on NVSwitch (HGX) systems a running ``nvidia-fabricmanager``: without
it every GPU answers NVML while ``cuInit`` fails with CUDA_ERROR_SYSTEM_NOT_READY.
"""

from __future__ import annotations

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.cudaprobe import ProbeResult
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip
from tunelab.agent.gpu import FABRIC_STATES, GpuError

FABRIC_MANAGER = "nv-fabricmanager"
FM_FIX = Remediation(
    command="systemctl enable --now nvidia-fabricmanager",
    persistent="install nvidia-fabricmanager of exactly the driver's version "
    "(nvidia-fabricmanager-<branch>) and enable its unit; it must start before CUDA work",
)
# What fixes each failing CUresult (cuda.h values).
CUDA_FIXES: dict[int, Remediation] = {
    34: Remediation(
        persistent="take the toolkit's stubs directory (…/lib64/stubs) out of LD_LIBRARY_PATH "
        "and /etc/ld.so.conf.d, so the driver's libcuda.so.1 is found"
    ),
    100: Remediation(
        persistent="in a container: pass /dev/nvidia-uvm and /dev/nvidia-uvm-tools too "
        "(lxc.cgroup2.devices.allow c <uvm major>:* rwm and a bind mount); on a host: "
        "modprobe nvidia-uvm (nvidia-modprobe -u -c=0)"
    ),
    304: Remediation(
        command="nvidia-modprobe -u -c=0",
        persistent="load nvidia-uvm at boot; in a container, allow and mount /dev/nvidia-uvm",
    ),
    802: FM_FIX,
    803: Remediation(
        persistent="install the driver's user-space libraries of the kernel module's version "
        "(cat /proc/driver/nvidia/version), or reboot after a driver upgrade; in a container, "
        "mount the host's libcuda instead of one baked into the image"
    ),
    804: Remediation(
        persistent="remove the cuda-compat forward-compatibility package: this GPU does not "
        "support it; use a driver of the CUDA version the application needs"
    ),
}
HUNG = Remediation(
    command="dmesg | grep -i -E 'NVRM|Xid' | tail",
    persistent="a driver that hangs cuInit needs a GPU reset or reboot; on NVSwitch hosts "
    "check that nvidia-fabricmanager is running",
)
NO_LIBRARY = Remediation(
    persistent="install the driver's user-space libraries (libnvidia-compute / "
    "nvidia-driver-<branch>); in a container, the NVIDIA container toolkit mounts them"
)


def _evidence(result: ProbeResult) -> list[Evidence]:
    return [
        ev("cuInit(0) in a child process", result.result_name or result.outcome),
        ev("libcuda", result.library or None),
        ev("cuDeviceGetCount", result.devices),
        ev("cuDriverGetVersion", result.driver_version),
        ev("probe seconds", f"{result.seconds:.2f}"),
    ]


def cuda_init(ctx: AuditContext) -> Finding:
    if not ctx.pci.gpus and not ctx.system.exists("/dev/nvidiactl"):
        return skip("no NVIDIA GPU on the PCI bus and no /dev/nvidiactl")
    result = ctx.cuda_init
    if result is None:
        return skip("a captured tree with no recorded cuInit probe: cuInit needs the live host")
    evidence = _evidence(result)
    expected = "cuInit returns CUDA_SUCCESS and sees every GPU"
    if result.outcome == "ok":
        version = result.driver_version or 0
        seen = f"cuInit ok in {result.seconds:.2f} s: {result.devices} device(s), driver API "
        seen += f"CUDA {version // 1000}.{version % 1000 // 10}"
        nvml = ctx.gpu.device_count() if ctx.nvml_skip() is None and ctx.gpu else None
        if nvml is not None and result.devices is not None and result.devices < nvml:
            return Finding(
                Status.WARN,
                f"{seen}, but NVML sees {nvml}: CUDA_VISIBLE_DEVICES or a device rule hides some",
                expected,
                evidence,
            )
        return Finding(Status.PASS, seen, expected, evidence)
    if result.outcome == "cuda_error" and result.result is not None:
        return Finding(
            Status.FAIL,
            f"cuInit failed: {result.result_name} ({result.meaning})",
            expected,
            evidence,
            CUDA_FIXES.get(result.result, Remediation()),
        )
    if result.outcome == "no_library":
        return Finding(
            Status.FAIL, f"no libcuda.so.1: {result.detail}", expected, evidence, NO_LIBRARY
        )
    if result.outcome == "timeout":
        return Finding(Status.FAIL, result.detail, expected, evidence, HUNG)
    return Finding(Status.ERROR, f"probe {result.outcome}: {result.detail}", expected, evidence)


def fabric_manager(ctx: AuditContext) -> Finding:
    switches = ctx.pci.nvswitches
    evidence = [ev(f"{s.sysfs}/class", s.attr("class")) for s in switches]
    if not switches:
        return skip(
            "no NVSwitch on the PCI bus (not an HGX/NVSwitch system): no fabric manager needed"
        )
    states = _fabric_states(ctx, evidence)
    running = [pid for pid, comm in ctx.processes.items() if comm == FABRIC_MANAGER]
    evidence.append(ev(f"/proc/*/comm = {FABRIC_MANAGER}", ", ".join(map(str, running)) or None))
    expected = f"{FABRIC_MANAGER} running and every GPU's fabric state COMPLETED"
    head = f"{len(switches)} NVSwitch(es)"
    bad = {label: s for label, s in states.items() if s != "COMPLETED"}
    if states and not bad:
        return Finding(
            Status.PASS, f"{head}; fabric COMPLETED on {len(states)} GPU(s)", expected, evidence
        )
    if bad:
        shown = "; ".join(f"{label} {state}" for label, state in bad.items())
        return Finding(
            Status.FAIL, f"{head}; fabric not ready: {shown}", expected, evidence, FM_FIX
        )
    if ctx.environment.in_container:
        return skip(
            f"{head}, in a container: the fabric manager runs on the host and NVML "
            "gives no fabric state here",
            evidence,
        )
    if running:
        return Finding(
            Status.PASS, f"{head}; {FABRIC_MANAGER} running (pid {running[0]})", expected, evidence
        )
    return Finding(
        Status.FAIL,
        f"{head} and no {FABRIC_MANAGER} process: CUDA will not start",
        expected,
        evidence,
        FM_FIX,
    )


def _fabric_states(ctx: AuditContext, evidence: list[Evidence]) -> dict[str, str]:
    """GPU label -> fabric state name, for GPUs whose NVML reports one."""
    if ctx.nvml_skip() is not None or ctx.gpu is None:
        return {}
    states: dict[str, str] = {}
    for index in range(ctx.gpu.device_count()):
        try:
            state = ctx.nvml_read(index, "fabric_state")
        except GpuError as exc:
            evidence.append(ev(f"nvml fabric_state (GPU {index})", f"error: {exc}"))
            continue
        evidence.append(ev(f"nvml fabric_state (GPU {index})", state))
        if isinstance(state, int) and state != 0:
            states[ctx.gpu_label(index)] = FABRIC_STATES.get(state, str(state))
    return states
