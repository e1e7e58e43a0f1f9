"""Inside a container: are the NVIDIA nodes the ones the host kernel serves, and do they open?

After a host kernel upgrade ``nvidia-uvm`` may come back on another major. The container still
has nodes (bind-mounted, or left from before), ``nvidia-smi`` still works (major 195 is fixed),
and CUDA fails. ``/proc/devices`` shows the host's live majors even inside the container, and
``open()``'s errno says which layer refuses: EPERM is the device cgroup (a stale host rule),
ENXIO/ENODEV is a node whose major no driver serves (a stale node).
"""

from __future__ import annotations

import errno
import os

from tunelab.agent.audit import devnodes
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip

REQUIRED = ("/dev/nvidiactl", "/dev/nvidia-uvm")
RESTART = Remediation(
    persistent="fix the container's device rules on the host, then restart it there "
    "(pct stop <CTID> && pct start <CTID>); better, pass the devices with devN: entries "
    "(PVE >= 8.1), whose cgroup rule is made from the live major at every start",
)
ERRNO_MEANING = {
    errno.EPERM: "device cgroup denies it: the host's allow rule is missing or names an old major",
    errno.EACCES: "permission bits or id mapping: this user may not open it",
    errno.ENXIO: "no driver serves this major: a stale node from before a reboot or reload",
    errno.ENODEV: "no driver serves this major: a stale node from before a reboot or reload",
    errno.ENOENT: "missing",
}


def _not_in_container(ctx: AuditContext) -> Finding | None:
    env = ctx.environment
    if env.in_container:
        return None
    return skip(
        f"not in a container ({env.kind}): device nodes are the host's own"
        + ("; see pve.lxc_device_rules" if env.kind == "proxmox_host" else ""),
        env.evidence,
    )


def _table_evidence(majors: dict[str, int]) -> Evidence:
    shown = ", ".join(f"{m} {n}" for n, m in sorted(majors.items()) if n.startswith("nvidia"))
    return ev("/proc/devices (character, nvidia*)", shown or "none")


def device_nodes(ctx: AuditContext) -> Finding:
    outside = _not_in_container(ctx)
    if outside is not None:
        return outside
    majors = ctx.majors
    if majors is None:
        return Finding(Status.ERROR, "/proc/devices unreadable")
    nodes = devnodes.nvidia_nodes(ctx.system)
    evidence = [_table_evidence(majors)]
    if devnodes.frontend_major(majors) is None and not nodes:
        return skip(
            "no NVIDIA driver on the host (no nvidia in /proc/devices) and no nodes", evidence
        )
    problems: list[str] = []
    for path in nodes:
        node = ctx.system.device_node(path)
        expected = devnodes.expected_node(path, majors)
        if node is None:
            continue
        if not node.is_char:
            evidence.append(ev(path, "not a character device"))
            problems.append(f"{path} is a plain file: the bind mount never happened")
            continue
        evidence.append(ev(path, f"c {node.major}:{node.minor}"))
        if expected is None:
            continue
        if expected.major is None:
            problems.append(
                f"{path} is {node.major}:{node.minor} but {expected.owner} is not in /proc/devices"
            )
        elif node.major != expected.major:
            problems.append(
                f"{path} is {node.major}:{node.minor} but the host's {expected.owner} is major "
                f"{expected.major} (stale node)"
            )
        elif node.minor != expected.minor:
            problems.append(f"{path} has minor {node.minor}, expected {expected.minor}")
    present = set(nodes)
    missing = [p for p in REQUIRED if p not in present]
    if not any(devnodes.expected_node(p, majors) and p[11:].isdigit() for p in nodes):
        missing.append("/dev/nvidia0..N")
    problems += [f"{p} missing (CUDA needs it)" for p in missing]
    if problems:
        return Finding(
            Status.FAIL,
            "; ".join(problems),
            "every node's major = /proc/devices",
            evidence,
            RESTART,
        )
    return Finding(
        Status.PASS,
        f"{len(nodes)} nodes match /proc/devices",
        "every node's major = /proc/devices",
        evidence,
    )


def device_access(ctx: AuditContext) -> Finding:
    outside = _not_in_container(ctx)
    if outside is not None:
        return outside
    nodes = devnodes.nvidia_nodes(ctx.system)
    majors = ctx.majors or {}
    if not nodes and devnodes.frontend_major(majors) is None:
        return skip("no NVIDIA driver on the host (no nvidia in /proc/devices) and no nodes")
    if not nodes:
        return Finding(
            Status.FAIL, "no /dev/nvidia* nodes in this container", "every node opens", [], RESTART
        )
    how = "open(O_RDWR)" if ctx.system.is_live else "open(O_RDWR) as recorded"
    evidence: list[Evidence] = []
    problems: list[str] = []
    opened = 0
    for path in nodes:
        node = ctx.system.device_node(path)
        if node is None or not node.is_char:
            evidence.append(ev(f"{how} {path}", "not a device node"))
            problems.append(f"{path}: not a device node (failed bind mount)")
            continue
        code = ctx.system.open_device(path)
        name = errno.errorcode.get(code, str(code)) if code else "ok"
        evidence.append(ev(f"{how} {path}", name))
        if code == 0:
            opened += 1
        elif code == errno.EACCES and path.startswith("/dev/nvidia-caps/"):
            opened += 1  # caps nodes are root-only by design (mode 0400/0444)
        else:
            meaning = ERRNO_MEANING.get(code, os.strerror(code))
            problems.append(f"{path}: {name} ({meaning})")
    if problems:
        return Finding(Status.FAIL, "; ".join(problems), "every node opens", evidence, RESTART)
    return Finding(
        Status.PASS, f"{opened} of {len(nodes)} nodes open", "every node opens", evidence
    )
