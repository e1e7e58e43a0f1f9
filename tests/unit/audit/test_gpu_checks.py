"""GPU checks from the real H200 NVML snapshots, each moved into one faulty state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.audit.hostbuilder import H200_ROOT
from tests.unit.audit.conftest import Audit, by_id
from tunelab.agent.gpu import GpuProcess, SnapshotBackend

NVML = Path(__file__).resolve().parents[2] / "fixtures" / "nvml"


@pytest.fixture
def h200_root(tmp_path: Path) -> Path:
    return Path(shutil.copytree(H200_ROOT, tmp_path / "root", symlinks=True))


def snapshot(name: str) -> SnapshotBackend:
    return SnapshotBackend(json.loads((NVML / name).read_text()))


def check(audit: Audit, root: Path, gpu: SnapshotBackend, check_id: str) -> dict[str, Any]:
    return by_id(audit(root, gpu, only=(check_id,)))[check_id]


def test_without_nvml_every_gpu_check_skips_with_the_reason(audit: Audit, h200_root: Path) -> None:
    checks = by_id(audit(h200_root))
    for check_id in (
        "gpu.persistence",
        "gpu.power_limit",
        "gpu.clock_events",
        "gpu.ecc",
        "gpu.stale_state",
    ):
        assert checks[check_id]["status"] == "SKIP"
        assert checks[check_id]["observed"] == "no NVML snapshot in this test"


def test_persistence_off_warns(audit: Audit, h200_root: Path) -> None:
    gpu = snapshot("h200-idle.json")
    assert check(audit, h200_root, gpu, "gpu.persistence")["status"] == "PASS"
    gpu.set_field(0, "persistence_mode", False)
    result = check(audit, h200_root, gpu, "gpu.persistence")
    assert result["status"] == "WARN" and result["remediation"]["command"] == "nvidia-smi -pm 1"


def test_power_limit_below_default_warns_with_the_default(audit: Audit, h200_root: Path) -> None:
    gpu = snapshot("h200-idle.json")
    gpu.set_field(0, "power_limit_watts", 500.0)
    result = check(audit, h200_root, gpu, "gpu.power_limit")
    assert result["status"] == "WARN" and "500 W of default 700 W" in result["observed"]
    assert result["remediation"]["command"] == "nvidia-smi -i 0 -pl 700"


def test_busy_power_cap_is_normal_but_thermal_slowdown_warns(audit: Audit, h200_root: Path) -> None:
    gpu = snapshot("h200-busy.json")  # captured at 622 W: sw_power_cap (0x4) active
    result = check(audit, h200_root, gpu, "gpu.clock_events")
    assert result["status"] == "PASS" and "sw_power_cap" in result["observed"]
    gpu.set_field(0, "clock_event_reasons", 0x4 | 0x40)
    result = check(audit, h200_root, gpu, "gpu.clock_events")
    assert result["status"] == "WARN" and "hw_thermal_slowdown" in result["observed"]


def test_ecc_faults(audit: Audit, h200_root: Path) -> None:
    gpu = snapshot("h200-idle.json")
    assert check(audit, h200_root, gpu, "gpu.ecc")["status"] == "PASS"
    gpu.set_field(0, "ecc_uncorrected_volatile", 3)
    assert check(audit, h200_root, gpu, "gpu.ecc")["status"] == "FAIL"
    gpu.set_field(0, "ecc_uncorrected_volatile", 0)
    gpu.set_field(0, "remapped_rows_pending", True)
    assert "remap pending" in check(audit, h200_root, gpu, "gpu.ecc")["observed"]


def test_stale_state_is_busy_without_process_or_memory(audit: Audit, h200_root: Path) -> None:
    busy = snapshot("h200-busy.json")  # 99 % with a process holding 9.6 GB: real work
    assert check(audit, h200_root, busy, "gpu.stale_state")["status"] == "PASS"
    idle = snapshot("h200-idle.json")  # 615 MiB used by the driver, no process
    idle.set_field(0, "utilization_ratio", 1.0)
    result = check(audit, h200_root, idle, "gpu.stale_state")
    assert result["status"] == "WARN" and "stale driver state" in result["observed"]
    idle.processes = [GpuProcess(0, "GPU-x", 4242, 600 << 20)]
    assert check(audit, h200_root, idle, "gpu.stale_state")["status"] == "PASS"


def test_link_speed_below_max_passes_idle_and_warns_busy(audit: Audit, h200_root: Path) -> None:
    device = h200_root / "sys/devices/pci0000:00/0000:00:06.0"
    (device / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    idle = check(audit, h200_root, snapshot("h200-idle.json"), "pcie.link_speed")
    assert idle["status"] == "PASS" and "GPU idle" in idle["observed"]
    busy = check(audit, h200_root, snapshot("h200-busy.json"), "pcie.link_speed")
    assert busy["status"] == "WARN" and "2.5 of 32 GT/s" in busy["observed"]
    unknown = by_id(audit(h200_root, only=("pcie.link_speed",)))["pcie.link_speed"]
    assert unknown["status"] == "PASS" and "load unknown" in unknown["observed"]


def test_nvidia_module_version_mismatch_fails(audit: Audit, h200_root: Path) -> None:
    (h200_root / "sys/module/nvidia_uvm/version").write_text("570.133.07\n")
    result = by_id(audit(h200_root, only=("kernel.nvidia_module",)))["kernel.nvidia_module"]
    assert result["status"] == "FAIL" and "nvidia_uvm 570.133.07" in result["observed"]


def test_module_not_loaded_for_the_running_kernel_fails(audit: Audit, h200_root: Path) -> None:
    (h200_root / "proc/modules").write_text("")
    shutil.rmtree(h200_root / "sys/module/nvidia")
    result = by_id(audit(h200_root, only=("kernel.nvidia_module",)))["kernel.nvidia_module"]
    assert result["status"] == "FAIL"
    assert "no nvidia module built for kernel 6.18.44-fc-v657-gpu" in result["observed"]


def test_stale_state_with_nvml_v2_leaves_the_driver_reservation_out(
    audit: Audit, h200_root: Path
) -> None:
    idle = snapshot("h200-idle-v2.json")  # captured with v2: used 0, reserved 615 MiB
    result = check(audit, h200_root, idle, "gpu.stale_state")
    assert result["status"] == "PASS"
    assert "0 MiB used (+615 MiB driver-reserved), 0 process(es)" in result["observed"]
    idle.set_field(0, "utilization_ratio", 1.0)  # busy, nothing holds memory: stale
    result = check(audit, h200_root, idle, "gpu.stale_state")
    assert result["status"] == "WARN" and "stale driver state" in result["observed"]
    busy = snapshot("h200-busy-v2.json")  # the burn's process holds 9.2 GB
    result = check(audit, h200_root, busy, "gpu.stale_state")
    assert result["status"] == "PASS" and "9165 MiB used (+615 MiB" in result["observed"]


def test_without_v2_memory_info_the_reservation_is_said_to_be_included(
    audit: Audit, h200_root: Path
) -> None:
    result = check(audit, h200_root, snapshot("h200-idle.json"), "gpu.stale_state")
    assert "615 MiB used (driver reservation included: no NVML v2)" in result["observed"]


def test_gpu_locality_without_local_cpulist_names_the_cpus_not_none(
    audit: Audit, h200_root: Path
) -> None:
    (h200_root / "sys/devices/pci0000:00/0000:00:06.0/local_cpulist").unlink()
    result = check(audit, h200_root, snapshot("h200-idle.json"), "numa.gpu_locality")
    assert "None" not in result["observed"]
    assert result["observed"] == "0000:00:06.0 node -1 CPUs all (0-15: one NUMA node)"
