"""PCIe link width and speed along every hop from each NVIDIA GPU to its root port.

Two different faults, judged from sysfs attributes any user can read:

- **FAIL**: a link trained below what *both* of its ends support (a bad riser, a dirty slot,
  a retimer fault). It never fixes itself. Speed is judged only while the GPU is busy: GPUs
  drop link speed when idle to save power.
- **WARN**: every link runs at what its ends support, but a port above the GPU supports less
  than the GPU itself (an x16 GPU behind an x8 root port, a Gen3 switch above a Gen5 GPU), so
  the GPU gets a fraction of its host bandwidth however well the link trained. The warning
  names the limiting port and the bandwidth lost; on an 8-GPU PCIe host where all-reduce and
  weight loading cross the host, that is exactly what a tuner must know.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip, worst
from tunelab.agent.audit.pcitopo import PciFunction, parse_link_speed

EXPECTED = "every link at what both ends support, and no port above a GPU narrower or slower"
RELOCATE = {
    "width": "move the GPU to a slot whose root port and switch are as wide as the GPU (the "
    "board manual's slot map), or set the slot's bifurcation in the BIOS to x16, not x8x8",
    "speed": "set the port's PCIe generation to Auto/the GPU's in the BIOS, update the switch "
    "or retimer firmware, or move the GPU to a slot whose ports run at the GPU's speed",
}


def lane_gbps(gt_s: float) -> float:
    """Usable GB/s per lane and direction: 8b/10b up to 5 GT/s, 128b/130b to 32, FLIT at 64."""
    if gt_s <= 5.0:
        return gt_s * 0.8 / 8
    if gt_s <= 32.0:
        return gt_s * 128 / 130 / 8
    return gt_s * 242 / 256 / 8


@dataclass(frozen=True)
class _Limit:
    """A GPU whose path has a port that supports less than the GPU."""

    gpu: str
    gpu_top: float
    port: str
    port_kind: str
    port_top: float


def _value(attr: str, text: str | None) -> float | None:
    if attr == "speed":
        return parse_link_speed(text)
    try:
        return float(int(text)) if text and int(text) > 0 else None
    except ValueError:
        return None


def _links(ctx: AuditContext, attr: str) -> tuple[list[tuple[str, float, float]], list[Evidence]]:
    """(hop, current, expected) for every link on every GPU path, each link once."""
    seen: set[str] = set()
    links: list[tuple[str, float, float]] = []
    evidence: list[Evidence] = []
    for gpu in ctx.pci.gpus:
        chain = ctx.pci.chain(gpu)
        for index, func in enumerate(chain):
            if func.bdf in seen:
                continue
            seen.add(func.bdf)
            parent = chain[index + 1] if index + 1 < len(chain) else None
            if parent is None and index > 0:
                continue  # the root port's link is its child's link, already counted
            current_text = func.attr(f"current_link_{attr}")
            max_text = func.attr(f"max_link_{attr}")
            evidence.append(ev(f"{func.sysfs}/current_link_{attr}", current_text))
            evidence.append(ev(f"{func.sysfs}/max_link_{attr}", max_text))
            current, top = _value(attr, current_text), _value(attr, max_text)
            if current is None or top is None:
                continue
            if parent is not None:
                parent_max = _value(attr, parent.attr(f"max_link_{attr}"))
                if parent_max is not None:
                    top = min(top, parent_max)
            hop = func.bdf if parent is None else f"{parent.bdf} > {func.bdf}"
            links.append((hop, current, top))
    return links, evidence


def _port_kind(chain: list[PciFunction], func: PciFunction) -> str:
    return "root port" if func is chain[-1] else "switch port"


def _limits(ctx: AuditContext, attr: str, evidence: list[Evidence]) -> list[_Limit]:
    """GPUs with a port above them that supports less than the GPU (the smallest such port)."""
    found: list[_Limit] = []
    listed = {e.source for e in evidence}
    for gpu in ctx.pci.gpus:
        chain = ctx.pci.chain(gpu)
        gpu_top = _value(attr, gpu.attr(f"max_link_{attr}"))
        if gpu_top is None:
            continue
        narrowest: tuple[float, PciFunction] | None = None
        for func in chain[1:]:
            source = f"{func.sysfs}/max_link_{attr}"
            text = func.attr(f"max_link_{attr}")
            if source not in listed:
                evidence.append(ev(source, text))
                listed.add(source)
            top = _value(attr, text)
            if top is not None and (narrowest is None or top < narrowest[0]):
                narrowest = (top, func)
        if narrowest is not None and narrowest[0] < gpu_top:
            top, port = narrowest
            found.append(_Limit(gpu.bdf, gpu_top, port.bdf, _port_kind(chain, port), top))
    return found


def _gpu_link(ctx: AuditContext, bdf: str) -> tuple[float | None, float | None]:
    """The GPU's own maximum (speed GT/s, width lanes)."""
    func = ctx.pci.function(bdf)
    return _value("speed", func.attr("max_link_speed")), _value(
        "width", func.attr("max_link_width")
    )


def _limit_text(ctx: AuditContext, limit: _Limit, attr: str) -> str:
    speed, width = _gpu_link(ctx, limit.gpu)
    if attr == "width":
        per_lane = lane_gbps(speed or 0.0)
        full, got = limit.gpu_top * per_lane, limit.port_top * per_lane
        caps = f"x{limit.gpu_top:.0f}-capable GPU limited to x{limit.port_top:.0f}"
    else:
        lanes = width or 0.0
        full, got = lane_gbps(limit.gpu_top) * lanes, lane_gbps(limit.port_top) * lanes
        caps = f"{limit.gpu_top:g} GT/s-capable GPU limited to {limit.port_top:g} GT/s"
    lost = 100 * (1 - got / full) if full else 0.0
    rate = f": {full:.1f} -> {got:.1f} GB/s per direction" if full else ""
    return (
        f"{limit.gpu} {caps} by {limit.port_kind} {limit.port}, "
        f"{lost:.0f} % of its host bandwidth lost{rate}"
    )


def _judge(
    ctx: AuditContext,
    attr: str,
    trained_low: list[str],
    trained_low_status: Status,
    shown: str,
    evidence: list[Evidence],
    fail_fix: Remediation,
) -> Finding:
    limits = _limits(ctx, attr, evidence)
    parts = []
    status = Status.PASS
    if trained_low:
        status = trained_low_status
        what = (
            "link trained narrower than both ends support"
            if attr == "width"
            else "link below the speed both ends support while the GPU is busy"
        )
        parts.append(f"{what}: " + "; ".join(trained_low))
    if limits:
        status = worst([status, Status.WARN])
        parts.append("; ".join(_limit_text(ctx, limit, attr) for limit in limits))
    if status is Status.PASS:
        return Finding(Status.PASS, shown, EXPECTED, evidence)
    if status is Status.WARN and not trained_low:
        ports = sorted({limit.port for limit in limits})
        fix = Remediation(
            command="; ".join(
                f"lspci -vv -s {shlex.quote(port)} | grep -E 'LnkCap|LnkSta'" for port in ports
            ),
            persistent=RELOCATE[attr],
            reboot_required=True,
        )
    else:
        fix = fail_fix
    return Finding(status, "; ".join(parts), EXPECTED, evidence, fix)


def link_width(ctx: AuditContext) -> Finding:
    if not ctx.pci.gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    links, evidence = _links(ctx, "width")
    if not links:
        return skip("no link width attributes (not a PCIe link here)", evidence)
    narrow = [f"{hop} x{cur:.0f} of x{top:.0f}" for hop, cur, top in links if cur < top]
    shown = "; ".join(f"{hop} x{cur:.0f}" for hop, cur, _ in links)
    fix = Remediation(
        persistent="reseat the GPU/riser, check slot bifurcation in the BIOS; width loss "
        "does not fix itself"
    )
    return _judge(ctx, "width", narrow, Status.FAIL, shown, evidence, fix)


def link_speed(ctx: AuditContext) -> Finding:
    if not ctx.pci.gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    links, evidence = _links(ctx, "speed")
    if not links:
        return skip("no link speed attributes (not a PCIe link here)", evidence)
    busy = {gpu.bdf: ctx.gpu_busy(gpu.bdf) for gpu in ctx.pci.gpus}
    evidence += [ev(f"nvml utilization ({bdf})", b) for bdf, b in busy.items()]
    slow = [f"{hop} {cur:g} of {top:g} GT/s" for hop, cur, top in links if cur < top]
    shown = "; ".join(f"{hop} {cur:g} GT/s" for hop, cur, _ in links)
    fix = Remediation(
        persistent="check the BIOS PCIe generation setting and riser/retimer firmware"
    )
    if slow and not any(busy.values()):
        why = (
            "GPU idle: links downshift to save power"
            if busy and all(b is False for b in busy.values())
            else "GPU load unknown (no NVML): re-run under load to judge"
        )
        shown = f"{'; '.join(slow)} ({why})"
        slow = []
    return _judge(ctx, "speed", slow, Status.WARN, shown, evidence, fix)
