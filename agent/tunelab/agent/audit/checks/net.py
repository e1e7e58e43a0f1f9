"""Ports: can the agent and its servers get the ports they are given?

The agent hands a server a port by binding port 0, i.e. from the ephemeral range, and listens
on fixed ports itself (gRPC, metrics), as engines do (vLLM 8000, SGLang 30000). A fixed port
inside ``ip_local_port_range`` that ``ip_local_reserved_ports`` does not hold can be taken as
the source port of any outgoing connection (the load generator opens hundreds) just before
the listener binds it: "address already in use" at start, at random. And a range narrowed by
reservations leaves the load generator short of source ports.
"""

from __future__ import annotations

from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Finding, Remediation, Status, ev, skip
from tunelab.agent.system import format_cpu_list

RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def parse_ports(text: str) -> set[int]:
    """``8000,9473,30000-30010`` -> the set of ports (the kernel's list format)."""
    ports: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    return ports


def port_range(ctx: AuditContext) -> Finding:
    range_text = ctx.system.read_line(RANGE)
    reserved_text = ctx.system.read_line(RESERVED)
    evidence = [ev(RANGE, range_text), ev(RESERVED, reserved_text or "")]
    if range_text is None:
        return skip("no /proc/sys/net/ipv4 (no IPv4 here, or /proc/sys not mounted)", evidence)
    try:
        low, high = (int(v) for v in range_text.split())
        reserved = parse_ports(reserved_text or "")
    except ValueError:
        return Finding(Status.ERROR, f"unreadable port range {range_text!r}", evidence=evidence)
    free = sum(1 for port in range(low, high + 1) if port not in reserved)
    exposed = [
        (port, what)
        for port, what in ctx.options.agent_ports
        if low <= port <= high and port not in reserved
    ]
    expected = (
        "the agent's and engines' fixed ports outside the ephemeral range or reserved; "
        f">= {ctx.options.min_ephemeral_ports} ephemeral ports"
    )
    problems = []
    if exposed:
        shown = ", ".join(f"{port} ({what})" for port, what in exposed)
        problems.append(
            f"{shown} inside the ephemeral range {low}-{high} and not reserved: an outgoing "
            "connection can take it before the listener binds"
        )
    if free < ctx.options.min_ephemeral_ports:
        problems.append(f"only {free} ephemeral ports left for connections and handed-out ports")
    summary = f"ephemeral {low}-{high}, {free} usable, reserved [{reserved_text or ''}]"
    if not problems:
        return Finding(Status.PASS, summary, expected, evidence)
    ports = sorted(reserved | {port for port, _ in exposed})
    wanted = format_cpu_list(ports)
    return Finding(
        Status.WARN,
        "; ".join(problems) + f" ({summary})",
        expected,
        evidence,
        Remediation(
            command=f"sysctl -w net.ipv4.ip_local_reserved_ports={wanted}",
            persistent=f"echo net.ipv4.ip_local_reserved_ports={wanted} > "
            "/etc/sysctl.d/90-tunelab-ports.conf",
        ),
    )
