"""Issue 16's checks (cuInit, fabric manager, GPU interrupts, ports) on the H200 capture of
2026-12-01, each then moved into one faulty state."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.audit.conftest import by_id
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.cudaprobe import ProbeResult, probe
from tunelab.agent.audit.runner import run_audit
from tunelab.agent.gpu import SnapshotBackend
from tunelab.agent.system import CAPTURE_DIR, System

RUN16 = Path(__file__).resolve().parents[2] / "fixtures" / "audit" / "h200-run16"
GPU = "sys/devices/pci0000:00/0000:00:06.0"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Path(shutil.copytree(RUN16 / "root", tmp_path / "root", symlinks=True))


def nvml() -> SnapshotBackend:
    return SnapshotBackend(json.loads((RUN16 / "nvml.json").read_text()))


def check(root: Path, check_id: str, gpu: SnapshotBackend | None = None) -> dict[str, Any]:
    ctx = AuditContext(System(root), gpu or nvml())
    return by_id(run_audit(ctx, (check_id,)))[check_id]


def record_probe(root: Path, **fields: object) -> None:
    (root / CAPTURE_DIR / "cuda-init.json").write_text(json.dumps(fields))


# --- gpu.cuda_init ---------------------------------------------------------------------------


def test_cuinit_on_the_h200_passes_with_the_driver_api_version(root: Path) -> None:
    result = check(root, "gpu.cuda_init")  # the probe's answer there: CUDA_SUCCESS, 1 device
    assert result["status"] == "PASS"
    assert result["observed"].startswith("cuInit ok in 0.47 s: 1 device(s), driver API CUDA 13.0")


@pytest.mark.parametrize(
    ("code", "name", "fix"),
    [
        (100, "CUDA_ERROR_NO_DEVICE", "nvidia-uvm"),
        (304, "CUDA_ERROR_OPERATING_SYSTEM", "nvidia-modprobe -u"),
        (802, "CUDA_ERROR_SYSTEM_NOT_READY", "nvidia-fabricmanager"),
        (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "/proc/driver/nvidia/version"),
        (34, "CUDA_ERROR_STUB_LIBRARY", "stubs"),
    ],
)
def test_each_failing_curesult_is_named_explained_and_fixed(
    root: Path, code: int, name: str, fix: str
) -> None:
    record_probe(root, outcome="cuda_error", result=code, library="libcuda.so.1", seconds=0.2)
    result = check(root, "gpu.cuda_init")
    assert result["status"] == "FAIL" and name in result["observed"]
    remediation = result["remediation"]["command"] + result["remediation"]["persistent"]
    assert fix in remediation


def test_fewer_cuda_devices_than_nvml_gpus_warns(root: Path) -> None:
    record_probe(root, outcome="ok", result=0, devices=0, driver_version=13000, seconds=0.3)
    result = check(root, "gpu.cuda_init")
    assert result["status"] == "WARN" and "NVML sees 1" in result["observed"]


def test_a_capture_without_a_probe_record_skips(root: Path) -> None:
    (root / CAPTURE_DIR / "cuda-init.json").unlink()
    assert check(root, "gpu.cuda_init")["status"] == "SKIP"


def test_a_crashing_or_garbled_child_is_an_error_not_a_pass() -> None:
    def crashed(argv: list[str], timeout: float) -> tuple[int, bytes]:
        return -11, b"Segmentation fault"

    def garbled(argv: list[str], timeout: float) -> tuple[int, bytes]:
        return 0, b"not json"

    def hung(argv: list[str], timeout: float) -> tuple[int, bytes]:
        raise subprocess.TimeoutExpired(argv, timeout)

    assert probe(run=crashed).outcome == "crashed"
    assert probe(run=garbled).outcome == "garbled"
    assert probe(run=hung).outcome == "timeout"
    assert ProbeResult("crashed", detail="x").meaning == "x"


# --- gpu.fabric_manager ------------------------------------------------------------------------


def add_nvswitches(root: Path, count: int = 4) -> None:
    """NVSwitch functions as sysfs shows them (10de:22a3, class 0x068000: "H100 NVSwitch")."""
    for index in range(count):
        bdf = f"0000:{0x80 + index:02x}:00.0"
        device = root / f"sys/devices/pci0000:80/{bdf}"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "device").write_text("0x22a3\n")
        (device / "class").write_text("0x068000\n")
        (root / "sys/bus/pci/devices" / bdf).symlink_to(f"../../../devices/pci0000:80/{bdf}")


def add_process(root: Path, pid: int, comm: str) -> None:
    (root / f"proc/{pid}").mkdir(parents=True, exist_ok=True)
    (root / f"proc/{pid}/comm").write_text(comm + "\n")


def test_no_nvswitch_skips_with_why(root: Path) -> None:
    result = check(root, "gpu.fabric_manager")
    assert result["status"] == "SKIP" and "no NVSwitch" in result["observed"]


def test_nvswitch_host_with_fabric_completed_passes(root: Path) -> None:
    add_nvswitches(root)
    gpu = nvml()
    gpu.set_field(0, "fabric_state", 3)
    result = check(root, "gpu.fabric_manager", gpu)
    assert result["status"] == "PASS" and "fabric COMPLETED on 1 GPU(s)" in result["observed"]


def test_nvswitch_host_whose_fabric_never_started_fails_with_the_unit(root: Path) -> None:
    add_nvswitches(root)
    gpu = nvml()
    gpu.set_field(0, "fabric_state", 1)
    result = check(root, "gpu.fabric_manager", gpu)
    assert result["status"] == "FAIL" and "NOT_STARTED" in result["observed"]
    assert result["remediation"]["command"] == "systemctl enable --now nvidia-fabricmanager"


def test_without_nvml_fabric_state_the_process_decides(root: Path) -> None:
    add_nvswitches(root)
    assert check(root, "gpu.fabric_manager")["status"] == "FAIL"  # NVML: NOT_SUPPORTED here
    add_process(root, 4321, "nv-fabricmanager")
    result = check(root, "gpu.fabric_manager")
    assert result["status"] == "PASS" and "pid 4321" in result["observed"]


# --- irq.gpu_affinity ------------------------------------------------------------------------


def test_the_h200s_vectors_spread_by_the_kernel_pass(root: Path) -> None:
    result = check(root, "irq.gpu_affinity")
    assert result["status"] == "PASS"
    assert result["observed"] == (
        "irqbalance not running; 0000:00:06.0 8 vectors on CPUs 0,1,2,3,4,5,14,15"
    )


def pile_on_cpu0(root: Path) -> None:
    for vector in (root / GPU / "msi_irqs").iterdir():
        (root / f"proc/irq/{vector.name}/effective_affinity_list").write_text("0\n")


def test_every_vector_on_one_cpu_without_irqbalance_warns(root: Path) -> None:
    pile_on_cpu0(root)
    result = check(root, "irq.gpu_affinity")
    assert result["status"] == "WARN" and "on one CPU" in result["observed"]
    assert "systemctl enable --now irqbalance" in result["remediation"]["command"]
    assert "/proc/irq/42/smp_affinity_list" in result["remediation"]["command"]
    add_process(root, 777, "irqbalance")  # it places low-rate vectors itself: fine
    result = check(root, "irq.gpu_affinity")
    assert result["status"] == "PASS" and "irqbalance running (pid 777)" in result["observed"]


def test_vectors_served_off_the_gpus_node_warn(root: Path) -> None:
    (root / "sys/devices/system/node/online").write_text("0-1\n")
    (root / GPU / "local_cpulist").write_text("0-7\n")
    result = check(root, "irq.gpu_affinity")
    assert result["status"] == "WARN"
    assert "0000:00:06.0 on CPUs 14,15 (local 0-7)" in result["observed"]


# --- net.port_range --------------------------------------------------------------------------

RANGE = "proc/sys/net/ipv4/ip_local_port_range"
RESERVED = "proc/sys/net/ipv4/ip_local_reserved_ports"


def test_the_h200s_default_range_exposes_the_agents_grpc_port(root: Path) -> None:
    result = check(root, "net.port_range")  # 32768-60999, nothing reserved, as captured
    assert result["status"] == "WARN"
    assert result["observed"].startswith("50051 (agent gRPC default) inside the ephemeral range")
    assert result["remediation"]["command"] == "sysctl -w net.ipv4.ip_local_reserved_ports=50051"


def test_reserved_ports_pass_and_a_wide_range_names_every_fixed_port(root: Path) -> None:
    (root / RESERVED).write_text("50051\n")
    assert check(root, "net.port_range")["status"] == "PASS"
    (root / RANGE).write_text("1024\t65535\n")
    (root / RESERVED).write_text("30000-30001\n")
    result = check(root, "net.port_range")
    assert result["status"] == "WARN"
    for port in ("50051", "9473", "8000"):
        assert port in result["observed"]
    assert "(SGLang default)" not in result["observed"]  # 30000 is reserved
    command = result["remediation"]["command"]
    assert command == "sysctl -w net.ipv4.ip_local_reserved_ports=8000,9473,30000-30001,50051"


def test_a_range_too_narrow_for_the_load_generator_warns(root: Path) -> None:
    (root / RANGE).write_text("60000\t60999\n")
    result = check(root, "net.port_range")
    assert result["status"] == "WARN" and "only 1000 ephemeral ports" in result["observed"]
