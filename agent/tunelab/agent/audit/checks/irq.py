"""Where the GPUs' interrupts land: spread over CPUs (irqbalance or the kernel), near the GPU.

A GPU's MSI-X vectors all on one CPU make that CPU a hot spot under load (completion
interrupts, and on a shared host the NICs' too), and vectors served from the other NUMA node
add a cross-socket hop to every completion. irqbalance spreads them by load; without it the
kernel's managed affinity usually spreads them at probe time. So this WARNs only when no
irqbalance runs and the vectors sit on one CPU, or when they sit outside the GPU's node.
"""

from __future__ import annotations

import re
import shlex

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip
from tunelab.agent.system import parse_cpu_list

INTERRUPTS = "/proc/interrupts"
_LINE = re.compile(r"^\s*(\d+):(.*)$")


def gpu_irqs(ctx: AuditContext, evidence: list[Evidence]) -> dict[int, str]:
    """IRQ number -> GPU BDF: each GPU's ``msi_irqs``, else /proc/interrupts lines naming it."""
    found: dict[int, str] = {}
    for gpu in ctx.pci.gpus:
        vectors = [n for n in ctx.system.names(f"{gpu.sysfs}/msi_irqs") if n.isdigit()]
        kinds = {gpu.attr(f"msi_irqs/{n}") for n in vectors}
        if vectors:
            evidence.append(
                ev(
                    f"{gpu.sysfs}/msi_irqs",
                    f"{len(vectors)} ({', '.join(sorted(k or '?' for k in kinds))})",
                )
            )
        found.update((int(n), gpu.bdf) for n in vectors)
    if found:
        return found
    text = ctx.system.read_text(INTERRUPTS) or ""
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        for gpu in ctx.pci.gpus:
            if gpu.bdf in match.group(2):
                found[int(match.group(1))] = gpu.bdf
    evidence.append(ev(INTERRUPTS, f"{len(found)} line(s) naming a GPU"))
    return found


def _cpus(ctx: AuditContext, irq: int, evidence: list[Evidence]) -> list[int]:
    for name in ("effective_affinity_list", "smp_affinity_list"):
        path = f"/proc/irq/{irq}/{name}"
        text = ctx.system.read_line(path)
        if text:
            evidence.append(ev(path, text))
            try:
                return parse_cpu_list(text)
            except ValueError:
                return []
    return []


def irqbalance(ctx: AuditContext) -> Finding:
    if not ctx.pci.gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    evidence: list[Evidence] = []
    irqs = gpu_irqs(ctx, evidence)
    if not irqs:
        return skip("no GPU interrupt vectors (driver not loaded)", evidence)
    balancers = [pid for pid, comm in ctx.processes.items() if comm == "irqbalance"]
    evidence.append(ev("/proc/*/comm = irqbalance", ", ".join(map(str, balancers)) or None))
    per_gpu: dict[str, set[int]] = {}
    for irq, bdf in sorted(irqs.items()):
        per_gpu.setdefault(bdf, set()).update(_cpus(ctx, irq, evidence))
    online = ctx.system.online_cpus()
    how = (
        f"irqbalance running (pid {balancers[0]})"
        if balancers
        else "irqbalance not visible here"
        if ctx.environment.in_container
        else "irqbalance not running"
    )
    shown = "; ".join(
        f"{bdf} {sum(1 for b in irqs.values() if b == bdf)} vectors on CPUs "
        f"{','.join(map(str, sorted(cpus)))}"
        for bdf, cpus in per_gpu.items()
    )
    expected = "GPU vectors spread over CPUs of the GPU's NUMA node"
    far = _off_node(ctx, per_gpu, evidence)
    if far:
        return Finding(
            Status.WARN,
            f"{how}; GPU interrupts served off the GPU's node: {'; '.join(far)}",
            expected,
            evidence,
            _pin_fix(ctx, irqs),
        )
    piled = [bdf for bdf, cpus in per_gpu.items() if len(cpus) == 1 and len(online) > 1]
    if piled and not balancers and not ctx.environment.in_container:
        return Finding(
            Status.WARN,
            f"{how} and every vector of {', '.join(piled)} on one CPU: {shown}",
            expected,
            evidence,
            _pin_fix(ctx, irqs),
        )
    return Finding(Status.PASS, f"{how}; {shown}", expected, evidence)


def _off_node(
    ctx: AuditContext, per_gpu: dict[str, set[int]], evidence: list[Evidence]
) -> list[str]:
    nodes = ctx.system.read_line("/sys/devices/system/node/online") or "0"
    if len(parse_cpu_list(nodes)) <= 1:
        return []
    far = []
    for bdf, cpus in per_gpu.items():
        local_text = ctx.pci.function(bdf).attr("local_cpulist")
        if not local_text:
            continue
        evidence.append(ev(f"/sys/bus/pci/devices/{bdf}/local_cpulist", local_text))
        outside = sorted(cpus - set(parse_cpu_list(local_text)))
        if outside:
            far.append(f"{bdf} on CPUs {','.join(map(str, outside))} (local {local_text})")
    return far


def _pin_fix(ctx: AuditContext, irqs: dict[int, str]) -> Remediation:
    lines = []
    for irq, bdf in sorted(irqs.items()):
        local = ctx.pci.function(bdf).attr("local_cpulist") or "<local CPUs>"
        lines.append(f"echo {shlex.quote(local)} > /proc/irq/{int(irq)}/smp_affinity_list")
    return Remediation(
        command="systemctl enable --now irqbalance  # or pin: " + "; ".join(lines[:4]),
        persistent="enable irqbalance (its hint policy keeps vectors on the device's node), or "
        "a boot-time unit that pins the GPU vectors to the GPU's local CPUs",
    )
