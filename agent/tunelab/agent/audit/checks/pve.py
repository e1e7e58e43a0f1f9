"""On a Proxmox host: do the containers' NVIDIA device rules still match the live majors?

A hand-written ``lxc.cgroup2.devices.allow: c 508:* rwm`` is right until the next kernel
upgrade moves ``nvidia-uvm`` to another dynamic major; then CUDA fails in the container with
EPERM while ``nvidia-smi`` keeps working. ``devN:`` entries (PVE >= 8.1) never go stale: PVE
reads the node's live numbers at every container start.
"""

from __future__ import annotations

import re
import shlex

from tunelab.agent.audit import devnodes
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Evidence, Finding, Remediation, Status, ev, skip, worst
from tunelab.agent.audit.pveconf import ContainerConfig, parse_config

CONF_DIR = "/etc/pve/lxc"
_SAFE_NODE = re.compile(r"^/dev/nvidia[A-Za-z0-9_./-]*$")


def _live_numbers(ctx: AuditContext, path: str, majors: dict[str, int]) -> tuple[int, int] | None:
    node = ctx.system.device_node(path)
    if node is not None and node.is_char:
        return node.major, node.minor
    expected = devnodes.expected_node(path, majors)
    if expected is not None and expected.major is not None:
        return expected.major, expected.minor
    return None


def _judge(
    ctx: AuditContext, conf: ContainerConfig, majors: dict[str, int]
) -> tuple[Status, str, list[Evidence]]:
    evidence = [ev(f"{conf.path}:{r.line}", r.text) for r in conf.allow]
    evidence += [ev(f"{conf.path} lxc.mount.entry", src) for src in conf.nvidia_sources]
    evidence += [ev(f"{conf.path} devN", p) for p in conf.nvidia_passthrough]
    live_majors = set(majors.values())
    problems: list[tuple[Status, str]] = []
    for rule in conf.allow:
        if rule.is_wildcard:
            problems.append(
                (
                    Status.WARN,
                    f"line {rule.line} '{rule.text}' gives the container every device (security)",
                )
            )
    for path in conf.nvidia_sources:
        numbers = _live_numbers(ctx, path, majors)
        if numbers is None:
            problems.append(
                (Status.FAIL, f"{path} is mounted but the host has no such node or driver")
            )
            continue
        major, minor = numbers
        evidence.append(ev(f"host {path}", f"c {major}:{minor}"))
        if not any(rule.covers(major, minor) for rule in conf.allow):
            stale = [
                r.text for r in conf.allow if r.major is not None and r.major not in live_majors
            ]
            hint = f"; rule {', '.join(stale)} names a major no driver holds now" if stale else ""
            problems.append(
                (Status.FAIL, f"{path} is {major}:{minor} and no allow rule covers it{hint}")
            )
    for path in conf.nvidia_passthrough:
        if ctx.system.device_node(path) is None:
            problems.append(
                (
                    Status.FAIL,
                    f"dev entry {path} does not exist on the host: the container will not start",
                )
            )
    for line in conf.comments_in_values:
        problems.append(
            (Status.WARN, f"line {line}: a '#' after an lxc value is part of the value")
        )
    if not problems:
        how = (
            "devN passthrough"
            if conf.nvidia_passthrough and not conf.nvidia_sources
            else "allow rules match"
        )
        return Status.PASS, f"CT {conf.ctid}: {how}", evidence
    status = worst(s for s, _ in problems)
    return status, f"CT {conf.ctid}: " + "; ".join(t for _, t in problems), evidence


def _devn_lines(conf: ContainerConfig) -> str:
    nodes = [p for p in conf.nvidia_sources if _SAFE_NODE.match(p)]
    return "; ".join(f"dev{i}: {p}" for i, p in enumerate(nodes))


def lxc_device_rules(ctx: AuditContext) -> Finding:
    if not ctx.system.is_dir("/etc/pve"):
        return skip(f"not a Proxmox host (no /etc/pve; environment {ctx.environment.kind})")
    names = [n for n in ctx.system.listdir(CONF_DIR) if n.endswith(".conf") and n[:-5].isdigit()]
    if not names:
        return skip(f"no container configs in {CONF_DIR}")
    majors = ctx.majors
    if majors is None:
        return Finding(Status.ERROR, "/proc/devices unreadable")
    evidence = [
        ev(
            "/proc/devices (character, nvidia*)",
            ", ".join(f"{m} {n}" for n, m in sorted(majors.items()) if n.startswith("nvidia")),
        )
    ]
    verdicts: list[tuple[Status, str]] = []
    fixes: list[str] = []
    persistent: list[str] = []
    for name in names:
        path = f"{CONF_DIR}/{name}"
        conf = parse_config(name[:-5], path, ctx.system.read_text(path) or "")
        if not (
            conf.nvidia_sources or conf.nvidia_passthrough or any(r.is_wildcard for r in conf.allow)
        ):
            continue
        status, text, found = _judge(ctx, conf, majors)
        evidence += found
        verdicts.append((status, text))
        if status is Status.FAIL:
            fixes.append(
                f"edit {shlex.quote(str(path))} so its allow rules name the live majors, then "
                f"pct stop {shlex.quote(str(conf.ctid))} && pct start {shlex.quote(str(conf.ctid))}"
            )
        if status is not Status.PASS and conf.nvidia_sources:
            persistent.append(
                f"CT {conf.ctid}: replace the allow rules and nvidia mount entries with "
                + _devn_lines(conf)
            )
    if not verdicts:
        return skip(f"no container in {CONF_DIR} passes NVIDIA devices", evidence)
    status = worst(s for s, _ in verdicts)
    shown = (
        [t for s, t in verdicts if s is not Status.PASS]
        if status is not Status.PASS
        else [t for _, t in verdicts]
    )
    return Finding(
        status,
        "; ".join(shown),
        "every NVIDIA node a container mounts is allowed at its live major; no wildcard rule",
        evidence,
        Remediation(persistent="; ".join(fixes + persistent))
        if status is not Status.PASS
        else Remediation(),
    )
