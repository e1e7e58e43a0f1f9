"""NVIDIA character devices: the live major numbers and what each ``/dev/nvidia*`` node must be.

``nvidia.ko`` always registers major 195; ``nvidia-uvm``, ``nvidia-caps``, ``nvidia-nvswitch``,
``nvidia-nvlink`` and ``nvidia-caps-imex-channels`` take a *dynamic* major, which changes with
module load order (a new kernel, a driver update). ``/proc/devices`` is not namespaced, so a
container reads the host kernel's live table there. Names are matched exactly: ``nvidia-caps``
is a prefix of ``nvidia-caps-imex-channels``. Drivers before 550 registered 195 as
``nvidia-frontend``; later ones as ``nvidia`` and ``nvidiactl``; both are understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tunelab.agent.system import System

FRONTEND_NAMES = ("nvidia", "nvidiactl", "nvidia-frontend")
_LINE = re.compile(r"^\s*(\d+)\s+(\S+)\s*$")
_GPU_NODE = re.compile(r"^nvidia(\d+)$")
_NVSWITCH_NODE = re.compile(r"^nvidia-nvswitch(\d+)$")
_CAP_NODE = re.compile(r"^nvidia-cap(\d+)$")


def char_majors(system: System) -> dict[str, int] | None:
    """Name → major from the ``Character devices:`` section; None when unreadable."""
    text = system.read_text("/proc/devices")
    if text is None:
        return None
    majors: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        if line.startswith("Character devices:"):
            in_char = True
            continue
        if not line.strip() or line.startswith("Block devices:"):
            if in_char:
                break
            continue
        match = _LINE.match(line)
        if in_char and match:
            majors.setdefault(match.group(2), int(match.group(1)))
    return majors


def frontend_major(majors: dict[str, int]) -> int | None:
    for name in FRONTEND_NAMES:
        if name in majors:
            return majors[name]
    return None


@dataclass(frozen=True)
class Expected:
    """What one node must be: the table name that owns its major, the major, the minor."""

    owner: str  # name in /proc/devices
    major: int | None  # None: the owning driver is not loaded
    minor: int


def expected_node(path: str, majors: dict[str, int]) -> Expected | None:
    """The expected numbers for ``/dev/nvidia...``; None for names we do not know."""
    name = path.rsplit("/", 1)[-1]
    front = frontend_major(majors)
    if name == "nvidiactl":
        return Expected("nvidia", front, 255)
    if name == "nvidia-modeset":
        return Expected("nvidia", front, 254)
    match = _GPU_NODE.match(name)
    if match:
        return Expected("nvidia", front, int(match.group(1)))
    if name in ("nvidia-uvm", "nvidia-uvm-tools"):
        return Expected("nvidia-uvm", majors.get("nvidia-uvm"), 0 if name == "nvidia-uvm" else 1)
    match = _CAP_NODE.match(name)
    if match and path.startswith("/dev/nvidia-caps/"):
        return Expected("nvidia-caps", majors.get("nvidia-caps"), int(match.group(1)))
    if path.startswith("/dev/nvidia-caps-imex-channels/channel") and name[7:].isdigit():
        owner = "nvidia-caps-imex-channels"
        return Expected(owner, majors.get(owner), int(name[7:]))
    match = _NVSWITCH_NODE.match(name)
    if match:
        return Expected("nvidia-nvswitch", majors.get("nvidia-nvswitch"), int(match.group(1)))
    if name == "nvidia-nvswitchctl":
        return Expected("nvidia-nvswitch", majors.get("nvidia-nvswitch"), 255)
    if name == "nvidia-nvlink":
        return Expected("nvidia-nvlink", majors.get("nvidia-nvlink"), 0)
    return None


def nvidia_nodes(system: System) -> list[str]:
    """Every ``/dev/nvidia*`` entry, and those in the caps directories, as host paths."""
    nodes: list[str] = []
    for name in system.listdir("/dev"):
        if not name.startswith("nvidia"):
            continue
        path = f"/dev/{name}"
        if name in ("nvidia-caps", "nvidia-caps-imex-channels") and system.is_dir(path):
            nodes += [f"{path}/{child}" for child in system.listdir(path)]
        else:
            nodes.append(path)
    return nodes
