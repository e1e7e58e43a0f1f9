"""Where the audit runs: bare metal, a VM, an LXC (or other) container, or a Proxmox host.

Checks use this to tell "not applicable here" from "wrong": a VM has no cpufreq because the
hypervisor owns CPU frequency, a container cannot read past byte 64 of PCI config space, and only
a Proxmox host has container configs to reconcile.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunelab.agent.audit.model import Evidence, ev
from tunelab.agent.system import System

BARE_METAL = "bare_metal"
VM = "vm"
LXC = "lxc"
CONTAINER = "container"  # docker, podman, systemd-nspawn: not LXC
PROXMOX_HOST = "proxmox_host"

# DMI vendors/products that only virtual machines report.
_VM_DMI = ("qemu", "kvm", "vmware", "virtualbox", "innotek", "xen", "bochs", "firecracker")


@dataclass(frozen=True)
class Environment:
    kind: str
    container: str  # "lxc", "docker", ... or ""
    virtualized: bool
    evidence: tuple[Evidence, ...]

    @property
    def in_container(self) -> bool:
        return bool(self.container)


def _container(system: System) -> tuple[str, list[Evidence]]:
    """The container engine, or "" on a machine.

    ``container=`` in PID 1's environment is set by the runtime itself and is believed. Marker
    files can outlive their container: an image built with docker and booted as a VM keeps
    ``/.dockerenv`` and even ``/run/systemd/container``. They count unless ``/`` is mounted from
    a block device with a disk filesystem, which no docker or podman container has. LXC's
    marker is believed as is (an LXC root can be an ext4 volume).
    """
    evidence: list[Evidence] = []
    environ = system.read_bytes("/proc/1/environ")
    if environ is not None:
        for item in environ.split(b"\0"):
            if item.startswith(b"container="):
                value = item.split(b"=", 1)[1].decode(errors="replace")
                evidence.append(ev("/proc/1/environ container", value))
                return value, evidence
    claims: list[str] = []
    marker = system.read_line("/run/systemd/container")
    if marker:
        evidence.append(ev("/run/systemd/container", marker))
        claims.append(marker)
    for path, engine in (("/.dockerenv", "docker"), ("/run/.containerenv", "podman")):
        if system.exists(path):
            evidence.append(ev(path, "present"))
            claims.append(engine)
    if not claims:
        return "", evidence
    if "lxc" in claims:
        return "lxc", evidence
    root = _root_mount(system)
    if root is not None:
        fstype, source = root
        evidence.append(ev("/proc/self/mountinfo /", f"{fstype} {source}"))
        if fstype in _DISK_FS and source.startswith("/dev/"):
            return "", evidence  # a machine booted from an image that kept the markers
    return claims[0], evidence


_DISK_FS = ("ext4", "ext3", "xfs", "btrfs", "f2fs")


def _root_mount(system: System) -> tuple[str, str] | None:
    """(fstype, source) of ``/`` from mountinfo (``... / / rw,... - ext4 /dev/vda rw``)."""
    for line in (system.read_text("/proc/self/mountinfo") or "").splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[4] == "/" and " - " in line:
            tail = line.split(" - ", 1)[1].split()
            if len(tail) >= 2:
                return tail[0], tail[1]
    return None


def _virtualized(system: System) -> tuple[bool, list[Evidence]]:
    evidence: list[Evidence] = []
    hypervisor = system.read_line("/sys/hypervisor/type")
    if hypervisor:
        evidence.append(ev("/sys/hypervisor/type", hypervisor))
        return True, evidence
    for attr in ("sys_vendor", "product_name"):
        value = system.read_line(f"/sys/class/dmi/id/{attr}")
        if value and any(name in value.lower() for name in _VM_DMI):
            evidence.append(ev(f"/sys/class/dmi/id/{attr}", value))
            return True, evidence
    cpuinfo = system.read_text("/proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flagged = "hypervisor" in line.split(":", 1)[-1].split()
            evidence.append(ev("/proc/cpuinfo flags", "hypervisor" if flagged else "no hypervisor"))
            return flagged, evidence
    return False, evidence


def detect(system: System) -> Environment:
    container, evidence = _container(system)
    virtual, virt_evidence = _virtualized(system)
    evidence += virt_evidence
    if container:
        kind = LXC if container == "lxc" else CONTAINER
    elif system.is_dir("/etc/pve"):
        evidence.append(ev("/etc/pve", "present"))
        kind = PROXMOX_HOST
    elif virtual:
        kind = VM
    else:
        kind = BARE_METAL
    return Environment(kind, container, virtual, tuple(evidence))
