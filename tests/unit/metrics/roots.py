"""Fixture roots for the host collector, built from real captures (see fixtures/README.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
CPU = "sys/devices/system/cpu"

# Dell XPS 13 7390 (i7-1065G7), cpu0's C-states as `grep -r . .../cpu0/cpuidle/stateN/` printed
# them in "Re: [PATCH] intel_idle: Add ICL support", linux-pm, 2020-08-26. Only cpu0 was shown.
XPS13_CPU0_IDLE = {
    "state1": {"name": "C1_ACPI", "time": "63400881", "usage": "195432", "disable": "0"},
    "state2": {"name": "C2_ACPI", "time": "144893598", "usage": "102740", "disable": "0"},
    "state3": {"name": "C3_ACPI", "time": "43225299", "usage": "24205", "disable": "0"},
}

# Doug Smythies' "s18" (6 CPUs, intel_pstate active mode), cpu3's cpufreq directory as
# `grep . /sys/devices/system/cpu/cpu3/cpufreq/*` printed it in the intel_pstate passive-mode
# thread, linux-pm, 2020-06. One policy per CPU with the same settings on all six.
S18_CPUFREQ = {
    "scaling_driver": "intel_pstate",
    "scaling_governor": "powersave",
    "scaling_available_governors": "performance powersave",
    "scaling_cur_freq": "800102",
    "scaling_max_freq": "4600000",
    "scaling_min_freq": "800000",
    "cpuinfo_max_freq": "4600000",
    "cpuinfo_min_freq": "800000",
}


def write(root: Path, host_path: str, text: str) -> None:
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def h200_vm(root: Path) -> Path:
    """The lab H200 VM: /proc as captured, no cpufreq, no cpuidle states."""
    shutil.copytree(FIXTURES / "h200-vm", root, dirs_exist_ok=True)
    (root / "stat-1s-earlier").unlink()
    return root


def h200_vm_stat_earlier() -> str:
    return (FIXTURES / "h200-vm" / "stat-1s-earlier").read_text()


def xps13_cpuidle(root: Path, cpus: int = 1) -> Path:
    """``cpus`` CPUs that each carry the XPS 13's captured cpu0 C-state counters."""
    h200_vm(root)
    write(root, f"{CPU}/online", "0" if cpus == 1 else f"0-{cpus - 1}")
    for cpu in range(cpus):
        for state, files in XPS13_CPU0_IDLE.items():
            for name, value in files.items():
                write(root, f"{CPU}/cpu{cpu}/cpuidle/{state}/{name}", value)
    return root


def s18_cpufreq(root: Path) -> Path:
    """Six CPUs with s18's captured cpufreq directory (scaling_cur_freq included)."""
    h200_vm(root)
    write(root, f"{CPU}/online", "0-5")
    for cpu in range(6):
        for name, value in S18_CPUFREQ.items():
            write(root, f"{CPU}/cpu{cpu}/cpufreq/{name}", value)
    return root
