"""Each fixture host (real pieces plus one fault) gets the verdicts the issue asks for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.audit import scenarios
from tests.fixtures.audit.hostbuilder import H200_ROOT
from tests.unit.audit.conftest import Audit, by_id
from tunelab.agent.gpu import SnapshotBackend

H200 = H200_ROOT.parent


def test_healthy_bare_metal_passes_everything_that_applies(tmp_path: Path, audit: Audit) -> None:
    scenarios.healthy_bare_metal(tmp_path)
    report = audit(tmp_path)
    assert report["environment"] == "bare_metal"
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert not [i for i, s in statuses.items() if s not in ("PASS", "SKIP")], statuses
    for check_id in (
        "cpu.governor",
        "cpu.cstates",
        "numa.balancing",
        "pcie.max_read_request",
        "pcie.link_width",
        "pcie.acs",
        "kernel.nvidia_module",
        "gpu.driver",
    ):
        assert statuses[check_id] == "PASS", check_id
    assert "PM QoS 99" in by_id(report)["cpu.cstates"]["observed"]


def test_badly_tuned_host_is_caught_on_every_knob(tmp_path: Path, audit: Audit) -> None:
    gp108m, h200 = scenarios.badly_tuned(tmp_path)
    checks = by_id(audit(tmp_path))
    governor = checks["cpu.governor"]
    assert governor["status"] == "FAIL" and "powersave on 8-15" in governor["observed"]
    assert checks["cpu.cstates"]["status"] == "WARN"
    assert (
        "133 µs" in checks["cpu.cstates"]["observed"] and "C6" in checks["cpu.cstates"]["observed"]
    )
    assert checks["numa.balancing"]["status"] == "FAIL"
    mrrs = checks["pcie.max_read_request"]
    assert mrrs["status"] == "WARN" and f"{gp108m} 512" in mrrs["observed"]
    assert mrrs["remediation"]["command"] == f"setpci -s {gp108m} CAP_EXP+8.w=5000:7000"
    width = checks["pcie.link_width"]
    assert width["status"] == "FAIL" and f"{h200} x8 of x16" in width["observed"]
    acs = checks["pcie.acs"]
    assert acs["status"] == "WARN" and "ReqRedir+" in acs["observed"]
    assert acs["remediation"]["command"] == "setpci -s 0000:00:02.0 ECAP_ACS+6.w=0000"


def test_vm_without_cpufreq_skips_cpu_checks_with_the_reason(audit: Audit, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(H200_ROOT, tmp_path / "root", symlinks=True)
    checks = by_id(
        audit(tmp_path / "root", only=("cpu.governor", "cpu.epp", "cpu.boost", "cpu.cstates"))
    )
    for check in checks.values():
        assert check["status"] == "SKIP", check
        assert "VM" in check["observed"]


def test_truncated_config_space_skips_with_the_privilege_reason(
    tmp_path: Path, audit: Audit
) -> None:
    scenarios.truncated_config(tmp_path)
    checks = by_id(audit(tmp_path))
    for check_id in ("pcie.max_read_request", "pcie.max_payload", "pcie.acs"):
        assert checks[check_id]["status"] == "SKIP"
        assert "truncated to 64 bytes" in checks[check_id]["observed"]
        assert "CAP_SYS_ADMIN" in checks[check_id]["observed"]
    assert checks["pcie.link_width"]["status"] == "PASS"  # sysfs attributes need no privilege


@pytest.mark.usefixtures("as_root")
def test_container_with_stale_uvm_major(tmp_path: Path, audit: Audit) -> None:
    scenarios.lxc_container(tmp_path, uvm_major=scenarios.OLD_UVM_MAJOR, uvm_open="ENXIO")
    report = audit(tmp_path)
    checks = by_id(report)
    assert report["environment"] == "lxc"
    nodes = checks["lxc.device_nodes"]
    assert nodes["status"] == "FAIL"
    assert "/dev/nvidia-uvm is 511:0 but the host's nvidia-uvm is major 238" in nodes["observed"]
    access = checks["lxc.device_access"]
    assert access["status"] == "FAIL" and "ENXIO" in access["observed"]
    assert "/dev/nvidia0" not in access["observed"]  # 195 is fixed and still opens


@pytest.mark.usefixtures("as_root")
def test_container_whose_cgroup_rule_is_stale_gets_eperm_explained(
    tmp_path: Path, audit: Audit
) -> None:
    scenarios.lxc_container(tmp_path, uvm_open="EPERM")
    checks = by_id(audit(tmp_path))
    assert checks["lxc.device_nodes"]["status"] == "PASS"
    access = checks["lxc.device_access"]
    assert access["status"] == "FAIL" and "device cgroup" in access["observed"]


@pytest.mark.usefixtures("as_root")
def test_container_with_plain_file_instead_of_node(tmp_path: Path, audit: Audit) -> None:
    tree = scenarios.lxc_container(tmp_path)
    del tree.nodes["/dev/nvidia-uvm"]
    tree.plain_file_node("/dev/nvidia-uvm")
    tree.finish()
    checks = by_id(audit(tmp_path))
    assert "plain file" in checks["lxc.device_nodes"]["observed"]
    assert "failed bind mount" in checks["lxc.device_access"]["observed"]


@pytest.mark.usefixtures("as_root")
def test_proxmox_host_rules_naming_an_old_major(tmp_path: Path, audit: Audit) -> None:
    scenarios.proxmox_host(tmp_path)
    report = audit(tmp_path)
    check = by_id(report)["pve.lxc_device_rules"]
    assert report["environment"] == "proxmox_host"
    assert check["status"] == "FAIL"
    assert "CT 101: /dev/nvidia-uvm is 238:0 and no allow rule covers it" in check["observed"]
    assert "c 511:* rwm names a major no driver holds now" in check["observed"]
    assert "CT 102" not in check["observed"]  # devN passthrough; its stale snapshot is ignored
    assert "CT 103: line 12 'a' gives the container every device (security)" in check["observed"]
    assert "dev2: /dev/nvidia-uvm" in check["remediation"]["persistent"]


def test_h200_snapshot_gpu_checks_pass_and_busy_changes_link_judgement(
    tmp_path: Path, audit: Audit
) -> None:
    import shutil

    shutil.copytree(H200_ROOT, tmp_path / "root", symlinks=True)
    snapshot = json.loads((H200 / "nvml.json").read_text())
    gpu = SnapshotBackend(snapshot)
    checks = by_id(audit(tmp_path / "root", gpu))
    for check_id in (
        "gpu.driver",
        "gpu.persistence",
        "gpu.power_limit",
        "gpu.clock_events",
        "gpu.ecc",
        "gpu.stale_state",
        "kernel.nvidia_module",
    ):
        assert checks[check_id]["status"] == "PASS", checks[check_id]
    assert "580.159.04" in checks["gpu.driver"]["observed"]


def test_a_narrower_and_slower_port_above_the_gpus_is_warned_with_the_bandwidth_lost(
    tmp_path: Path, audit: Audit
) -> None:
    gpus = scenarios.narrow_upstream(tmp_path)  # Gen5 x16 GPUs, Gen3 x16 switch, Gen3 x8 root
    checks = by_id(audit(tmp_path))
    width, speed = checks["pcie.link_width"], checks["pcie.link_speed"]
    assert width["status"] == "WARN"  # every link trained at what its ends support: not FAIL
    for gpu in gpus:
        assert f"{gpu} x16-capable GPU limited to x8 by root port 0000:00:02.0" in width["observed"]
    assert "50 % of its host bandwidth lost: 63.0 -> 31.5 GB/s" in width["observed"]
    assert "lspci -vv -s 0000:00:02.0" in width["remediation"]["command"]
    assert speed["status"] == "WARN"
    assert (
        f"{gpus[0]} 32 GT/s-capable GPU limited to 8 GT/s by switch port 0000:08:00.0"
        in (speed["observed"])
    )
    assert "75 % of its host bandwidth lost" in speed["observed"]
    sources = {e["source"] for e in width["evidence"]}
    assert "/sys/bus/pci/devices/0000:00:02.0/max_link_width" in sources


def test_a_link_trained_below_both_ends_stays_a_fail_beside_the_port_warning(
    tmp_path: Path, audit: Audit
) -> None:
    scenarios.narrow_upstream(tmp_path)
    gpu = tmp_path / "sys/bus/pci/devices/0000:11:00.0"
    (gpu / "current_link_width").write_text("4\n")  # x4 although GPU and switch port are x16
    width = by_id(audit(tmp_path))["pcie.link_width"]
    assert width["status"] == "FAIL"
    assert (
        "link trained narrower than both ends support: 0000:08:01.0 > 0000:11:00.0 x4 of x16"
        in (width["observed"])
    )
    assert "limited to x8 by root port" in width["observed"]
