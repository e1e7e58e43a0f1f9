"""Proxmox container configs (``/etc/pve/lxc/<id>.conf``): the parts that pass NVIDIA devices in.

Only the current configuration counts: it is everything before the first ``[section]`` line
(``[snapname]`` snapshots and ``[pve:pending]`` hold old or not-yet-applied copies). ``lxc.*``
keys take ``key: value`` or ``key = value``. A trailing ``# comment`` on an lxc line is not a
comment to LXC; it is kept apart and reported, because LXC would read it as part of the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ALLOW = re.compile(r"^(a|[cb])(?:\s+(\d+|\*):(\d+|\*)(?:\s+([rwm]+))?)?$")
_DEVN = re.compile(r"^dev(\d+)$")


@dataclass(frozen=True)
class DeviceRule:
    """One ``lxc.cgroup[2].devices.allow`` rule."""

    line: int
    text: str
    kind: str  # "a", "c" or "b"
    major: int | None  # None = wildcard
    minor: int | None
    access: str

    def covers(self, major: int, minor: int) -> bool:
        if self.kind == "a":
            return True
        if self.kind != "c" or "r" not in self.access or "w" not in self.access:
            return False
        return (self.major is None or self.major == major) and (
            self.minor is None or self.minor == minor
        )

    @property
    def is_wildcard(self) -> bool:
        return self.kind == "a" or (self.kind == "c" and self.major is None)


@dataclass
class ContainerConfig:
    ctid: str
    path: str
    allow: list[DeviceRule] = field(default_factory=list)
    mounts: list[tuple[int, str]] = field(default_factory=list)  # (line, source under /dev)
    passthrough: list[tuple[int, str]] = field(default_factory=list)  # devN: (line, path)
    comments_in_values: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def nvidia_sources(self) -> list[str]:
        return [src for _, src in self.mounts if src.startswith("/dev/nvidia")]

    @property
    def nvidia_passthrough(self) -> list[str]:
        return [p for _, p in self.passthrough if p.startswith("/dev/nvidia")]


def _split(line: str) -> tuple[str, str] | None:
    for sep in (":", "="):
        key, found, value = line.partition(sep)
        if found and key.strip() and " " not in key.strip():
            return key.strip(), value.strip()
    return None


def parse_rule(number: int, value: str) -> DeviceRule | None:
    match = _ALLOW.match(value)
    if not match:
        return None
    kind, major, minor, access = match.groups()
    return DeviceRule(
        line=number,
        text=value,
        kind=kind,
        major=None if major in (None, "*") else int(major),
        minor=None if minor in (None, "*") else int(minor),
        access=access or "rwm",
    )


def parse_config(ctid: str, path: str, text: str) -> ContainerConfig:
    config = ContainerConfig(ctid, path)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("["):
            break  # snapshots and pending changes follow; they are not the running config
        if not line or line.startswith("#"):
            continue
        pair = _split(line)
        if pair is None:
            continue
        key, value = pair
        if key.startswith("lxc.") and " #" in value:
            config.comments_in_values.append(number)
            value = value.split(" #", 1)[0].strip()
        if key in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"):
            rule = parse_rule(number, value)
            if rule is None:
                config.problems.append(f"line {number}: cannot read allow rule {value!r}")
            else:
                config.allow.append(rule)
        elif key == "lxc.mount.entry":
            source = value.split()[0] if value.split() else ""
            if source.startswith("/dev/"):
                config.mounts.append((number, source))
        elif _DEVN.match(key):
            config.passthrough.append((number, value.split(",", 1)[0].strip()))
    return config
