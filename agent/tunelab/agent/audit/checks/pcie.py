"""PCIe checks along every hop from each NVIDIA GPU to its root port.

MaxReadReq and MaxPayload come from DevCtl in the PCIe capability, ACS from its extended
capability; both need the full config space (root on the host). Link width and speed come from
sysfs attributes any user can read (``checks.pcielink``).
"""

from __future__ import annotations

import itertools
import shlex
from dataclasses import dataclass, field

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip
from tunelab.agent.audit.pciconfig import (
    AcsCap,
    ConfigSpace,
    ConfigSpaceError,
    PcieCap,
    Truncated,
    setpci_readrq_command,
)
from tunelab.agent.audit.pcitopo import PciFunction

TRUNCATED = (
    "config space truncated to {size} bytes for {bdfs}: reading the PCIe capability needs "
    "CAP_SYS_ADMIN in the initial user namespace (run the audit as root on the host, not in "
    "a container)"
)
MRRS_UDEV = (
    'udev rule: ACTION=="bind", SUBSYSTEM=="pci", ATTR{vendor}=="0x10de", '
    'RUN+="/usr/bin/setpci -s $kernel CAP_EXP+8.w=5000:7000" (or the BIOS "Max Read Request" '
    "setting); A/B it with nvbandwidth -t host_to_device_memcpy_ce"
)


@dataclass
class _Walk:
    """The PCIe capabilities along the GPUs' paths, or why they could not be read."""

    caps: dict[str, PcieCap] = field(default_factory=dict)
    truncated: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)


def _config(func: PciFunction, walk: _Walk) -> ConfigSpace | None:
    cfg = func.config
    if cfg is None:
        walk.errors.append(f"{func.bdf}: {func.sysfs}/config unreadable")
        return None
    if isinstance(cfg, ConfigSpaceError):
        walk.errors.append(f"{func.bdf}: {cfg}")
        return None
    return cfg


def _walk(ctx: AuditContext) -> _Walk:
    walk = _Walk()
    for gpu in ctx.pci.gpus:
        for func in ctx.pci.chain(gpu):
            if func.bdf in walk.caps or func.bdf in walk.truncated:
                continue
            cfg = _config(func, walk)
            if cfg is None:
                continue
            try:
                cap = cfg.pcie()
            except ConfigSpaceError as exc:
                walk.errors.append(f"{func.bdf}: {exc}")
                continue
            if isinstance(cap, Truncated):
                walk.truncated[func.bdf] = cap.size
                walk.evidence.append(ev(f"{func.sysfs}/config", f"{cap.size} bytes"))
            elif cap is not None:
                walk.caps[func.bdf] = cap
                walk.evidence.append(
                    ev(
                        f"{func.sysfs}/config DevCtl@0x{cap.offset + 8:02x} ({cap.port_type_name})",
                        f"0x{cap.devctl:04x}: MaxPayload {cap.max_payload}, "
                        f"MaxReadReq {cap.max_read_request}",
                    )
                )
    return walk


def _unjudged(ctx: AuditContext, walk: _Walk) -> Finding | None:
    """SKIP/ERROR when no GPU's capability could be read at all."""
    if not ctx.pci.gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    if any(gpu.bdf in walk.caps for gpu in ctx.pci.gpus):
        return None
    if walk.truncated:
        size = min(walk.truncated.values())
        return skip(TRUNCATED.format(size=size, bdfs=", ".join(walk.truncated)), walk.evidence)
    return Finding(
        Status.ERROR, "; ".join(walk.errors) or "no PCIe capability found", evidence=walk.evidence
    )


def max_read_request(ctx: AuditContext) -> Finding:
    walk = _walk(ctx)
    unjudged = _unjudged(ctx, walk)
    if unjudged is not None:
        return unjudged
    bus_perf = "pcie_bus_perf" in ctx.cmdline
    low: list[str] = []
    seen: list[str] = []
    fixes: list[str] = []
    for gpu in ctx.pci.gpus:
        cap = walk.caps.get(gpu.bdf)
        if cap is None:
            continue
        expected = min(cap.max_payload, 4096) if bus_perf else ctx.options.max_read_request
        seen.append(f"{gpu.bdf} {cap.max_read_request}")
        if cap.max_read_request < expected:
            low.append(gpu.bdf)
            fixes.append(setpci_readrq_command(gpu.bdf, expected))
    expect_text = (
        "MaxReadReq = MaxPayload (pci=pcie_bus_perf)"
        if bus_perf
        else f"MaxReadReq {ctx.options.max_read_request} bytes on every GPU"
    )
    if walk.truncated:
        seen.append("not readable: " + ", ".join(walk.truncated))
    if not low:
        return Finding(Status.PASS, "MaxReadReq " + "; ".join(seen), expect_text, walk.evidence)
    return Finding(
        Status.WARN,
        f"MaxReadReq below target on {len(low)} GPU(s): " + "; ".join(seen),
        expect_text,
        walk.evidence,
        Remediation(command="; ".join(fixes), persistent=MRRS_UDEV),
    )


def max_payload(ctx: AuditContext) -> Finding:
    walk = _walk(ctx)
    unjudged = _unjudged(ctx, walk)
    if unjudged is not None:
        return unjudged
    paths: list[str] = []
    bad: list[str] = []
    for gpu in ctx.pci.gpus:
        hops = [(f.bdf, walk.caps[f.bdf]) for f in ctx.pci.chain(gpu) if f.bdf in walk.caps]
        paths.append(" > ".join(f"{bdf} {cap.max_payload}" for bdf, cap in reversed(hops)))
        for (child, ccap), (parent, pcap) in itertools.pairwise(hops):
            if ccap.max_payload > pcap.max_payload:
                bad.append(f"{child} {ccap.max_payload} > {parent} {pcap.max_payload}")
    if not bad:
        return Finding(
            Status.PASS,
            "MaxPayload " + "; ".join(paths),
            "no hop larger than the port above",
            walk.evidence,
        )
    return Finding(
        Status.FAIL,
        "MaxPayload larger than the port above: " + "; ".join(bad),
        "no hop larger than the port above (larger TLPs are malformed upstream)",
        walk.evidence,
        Remediation(
            persistent="let the kernel set MPS consistently: pci=pcie_bus_safe on the kernel "
            "command line, or MPS 'Auto' in the BIOS",
            reboot_required=True,
        ),
    )


def acs(ctx: AuditContext) -> Finding:
    if not ctx.pci.gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    bridges: dict[str, PciFunction] = {}
    for gpu in ctx.pci.gpus:
        for func in ctx.pci.chain(gpu)[1:]:
            bridges.setdefault(func.bdf, func)
    if not bridges:
        return skip("GPUs sit on the root bus with no bridge above them: no ACS in their path")
    walk = _Walk()
    enabled: dict[str, AcsCap] = {}
    truncated: list[str] = []
    for bdf, func in bridges.items():
        cfg = _config(func, walk)
        if cfg is None:
            continue
        try:
            cap = cfg.acs()
        except ConfigSpaceError as exc:
            walk.errors.append(f"{bdf}: {exc}")
            continue
        if isinstance(cap, Truncated):
            truncated.append(bdf)
            walk.evidence.append(ev(f"{func.sysfs}/config", f"{cap.size} bytes"))
        elif cap is None:
            walk.evidence.append(ev(f"{func.sysfs}/config ACS", "no ACS capability"))
        else:
            walk.evidence.append(
                ev(f"{func.sysfs}/config ACSCtl@0x{cap.offset + 6:03x}", f"0x{cap.control:04x}")
            )
            if cap.control:
                enabled[bdf] = cap
    if truncated and len(truncated) == len(bridges):
        size = 64
        return skip(TRUNCATED.format(size=size, bdfs=", ".join(truncated)), walk.evidence)
    if walk.errors and not enabled:
        return Finding(Status.ERROR, "; ".join(walk.errors), evidence=walk.evidence)
    if not enabled:
        return Finding(
            Status.PASS,
            f"ACS off on {len(bridges)} bridge(s) above the GPUs",
            "ACS off",
            walk.evidence,
        )
    return Finding(
        Status.WARN,
        "ACS on above the GPUs (P2P is redirected through the root complex): "
        + "; ".join(
            f"{bdf} {' '.join(n + '+' for n in cap.enabled)}" for bdf, cap in enabled.items()
        ),
        "ACS off on bridges above GPUs (keep it on only for VM passthrough)",
        walk.evidence,
        Remediation(
            command="; ".join(f"setpci -s {shlex.quote(bdf)} ECAP_ACS+6.w=0000" for bdf in enabled),
            persistent="disable ACS in the BIOS, or run the setpci lines from a boot-time unit",
        ),
    )
