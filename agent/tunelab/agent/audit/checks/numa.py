"""NUMA checks: automatic balancing off on multi-node hosts; where each GPU sits."""

from __future__ import annotations

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip
from tunelab.agent.system import format_cpu_list, parse_cpu_list

NODES = "/sys/devices/system/node/online"
BALANCING = "/proc/sys/kernel/numa_balancing"


def _nodes(ctx: AuditContext) -> list[int]:
    text = ctx.system.read_line(NODES)
    return parse_cpu_list(text) if text else []


def balancing(ctx: AuditContext) -> Finding:
    nodes = _nodes(ctx)
    value = ctx.system.read_line(BALANCING)
    evidence = [ev(NODES, ",".join(map(str, nodes)) or None), ev(BALANCING, value)]
    if value is None:
        return skip("kernel built without NUMA balancing (no kernel.numa_balancing)", evidence)
    if value == "0":
        return Finding(Status.PASS, f"numa_balancing=0 ({len(nodes) or 1} node(s))", "0", evidence)
    if len(nodes) <= 1:
        return skip(f"numa_balancing={value} but one NUMA node: nothing to migrate", evidence)
    on_host = ctx.environment.in_container  # a host-wide sysctl: a container cannot set it
    return Finding(
        Status.FAIL,
        f"numa_balancing={value} on {len(nodes)} nodes: the kernel migrates pages and "
        "tasks away from the GPU's node",
        "0 on multi-node hosts",
        evidence,
        Remediation(
            command="" if on_host else "sysctl -w kernel.numa_balancing=0",
            persistent=("on the host: " if on_host else "")
            + "echo kernel.numa_balancing=0 > /etc/sysctl.d/90-tunelab.conf "
            "(or numa_balancing=disable on the kernel command line)",
        ),
    )


def gpu_locality(ctx: AuditContext) -> Finding:
    gpus = ctx.pci.gpus
    if not gpus:
        return skip("no NVIDIA GPU on the PCI bus")
    nodes = _nodes(ctx)
    evidence = []
    placed: list[str] = []
    unknown: list[str] = []
    for gpu in gpus:
        node = gpu.attr("numa_node")
        cpus = gpu.attr("local_cpulist")
        evidence += [ev(f"{gpu.sysfs}/numa_node", node), ev(f"{gpu.sysfs}/local_cpulist", cpus)]
        placed.append(f"{gpu.bdf} node {node} CPUs {_local_cpus(ctx, node, cpus, nodes, evidence)}")
        if node in (None, "-1"):
            unknown.append(gpu.bdf)
    observed = "; ".join(placed)
    if unknown and len(nodes) > 1:
        return Finding(
            Status.WARN,
            f"firmware gives no NUMA node for {', '.join(unknown)} on a {len(nodes)}-node host; "
            + observed,
            "each GPU's numa_node set, so servers can be pinned to local CPUs",
            evidence,
            Remediation(persistent="enable ACPI SRAT/NUMA reporting (BIOS: NPS/SNC setting)"),
        )
    return Finding(Status.PASS, observed, "recorded", evidence)


def _local_cpus(
    ctx: AuditContext,
    node: str | None,
    cpus: str | None,
    nodes: list[int],
    evidence: list[Evidence],
) -> str:
    """The GPU's local CPUs: its own list, else its node's, else all of a one-node host's."""
    if cpus:
        return cpus
    if node not in (None, "-1"):
        path = f"/sys/devices/system/node/node{node}/cpulist"
        node_cpus = ctx.system.read_line(path)
        evidence.append(ev(path, node_cpus))
        if node_cpus:
            return f"{node_cpus} (node {node}'s)"
    if len(nodes) <= 1:
        online = ctx.system.online_cpus()
        if online:
            return f"all ({format_cpu_list(online)}: one NUMA node)"
    return "not reported (no local_cpulist)"
