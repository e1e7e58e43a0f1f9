"""/proc/devices, Proxmox configs, environment detection: the edge cases that bite."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.audit.hostbuilder import H200_ROOT, HostTree
from tunelab.agent.audit import devnodes
from tunelab.agent.audit.environment import detect
from tunelab.agent.audit.pveconf import parse_config
from tunelab.agent.system import System


def test_proc_devices_from_the_h200_exact_names() -> None:
    majors = devnodes.char_majors(System(H200_ROOT))
    assert majors is not None
    assert majors["nvidia-uvm"] == 238 and majors["nvidia-caps"] == 241
    assert majors["nvidia-caps-imex-channels"] == 242  # not mistaken for nvidia-caps
    assert devnodes.expected_node("/dev/nvidia-caps/nvidia-cap2", majors) == devnodes.Expected(
        "nvidia-caps", 241, 2
    )
    assert "zram" not in majors  # block devices are another section


def test_pre_550_frontend_name_is_understood(tmp_path: Path) -> None:
    HostTree(tmp_path).write(
        "/proc/devices", "Character devices:\n195 nvidia-frontend\n509 nvidia-uvm\n"
    )
    majors = devnodes.char_majors(System(tmp_path)) or {}
    assert devnodes.expected_node("/dev/nvidia3", majors) == devnodes.Expected("nvidia", 195, 3)
    assert devnodes.expected_node("/dev/nvidiactl", majors) == devnodes.Expected("nvidia", 195, 255)


def test_pve_config_current_section_only_and_comment_in_value() -> None:
    text = (
        "lxc.cgroup2.devices.allow: c 195:* rwm # nvidia\n"
        "lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
        "dev0: /dev/nvidia0,gid=44\n"
        "[snap1]\nlxc.cgroup2.devices.allow: c 508:* rwm\n"
    )
    conf = parse_config("101", "/etc/pve/lxc/101.conf", text)
    assert [r.text for r in conf.allow] == ["c 195:* rwm"]
    assert conf.comments_in_values == [1]
    assert conf.nvidia_sources == ["/dev/nvidia-uvm"]
    assert conf.nvidia_passthrough == ["/dev/nvidia0"]
    assert conf.allow[0].covers(195, 7) and not conf.allow[0].covers(238, 0)


def test_wildcards_are_recognised() -> None:
    conf = parse_config(
        "1", "x", "lxc.cgroup2.devices.allow: a\nlxc.cgroup.devices.allow: c *:* rwm\n"
    )
    assert all(rule.is_wildcard and rule.covers(238, 0) for rule in conf.allow)


def test_docker_markers_on_a_disk_root_are_an_image_not_a_container(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/.dockerenv", "")
    tree.write("/run/systemd/container", "docker\n")
    tree.write("/proc/cpuinfo", "flags\t\t: fpu hypervisor\n")
    tree.write("/proc/self/mountinfo", "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n")
    assert detect(System(tmp_path)).kind == "vm"
    tree.write("/proc/self/mountinfo", "600 500 0:52 / / rw - overlay overlay rw,lowerdir=/x\n")
    assert detect(System(tmp_path)).kind == "container"


def test_lxc_marker_is_believed_even_on_a_disk_root(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/run/systemd/container", "lxc\n")
    tree.write(
        "/proc/self/mountinfo", "27 1 253:3 / / rw - ext4 /dev/mapper/pve-vm--101--disk--0 rw\n"
    )
    env = detect(System(tmp_path))
    assert env.kind == "lxc" and env.in_container


def test_proxmox_host_and_bare_metal(tmp_path: Path) -> None:
    assert detect(System(tmp_path)).kind == "bare_metal"
    (tmp_path / "etc" / "pve").mkdir(parents=True)
    assert detect(System(tmp_path)).kind == "proxmox_host"
