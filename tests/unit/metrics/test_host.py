"""Host collector against fixture roots built from real captures."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.unit.metrics import roots
from tunelab.agent.gpu import Cadence
from tunelab.agent.metrics.host import HostCollector, HostSource, cpu_utilization, parse_cpu_times
from tunelab.agent.system import System

CPU = "/sys/devices/system/cpu"


class RecordingSystem(System):
    """A System that remembers every host path it resolved (all reads go through path())."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.paths: list[str] = []

    def path(self, host_path: str) -> Path:
        self.paths.append(host_path)
        return super().path(host_path)


def collect(source: HostSource) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(HostCollector(source))
    return registry


def test_h200_vm_exports_proc_values_and_says_cpufreq_and_cpuidle_are_missing(
    tmp_path: Path,
) -> None:
    root = roots.h200_vm(tmp_path)
    (root / "proc" / "stat").write_text(roots.h200_vm_stat_earlier())
    source = HostSource(System(root))
    source.sample(Cadence.SLOW)
    source.sample(Cadence.FAST)
    registry = collect(source)
    # one /proc/stat reading gives no utilisation yet: absent, not zero
    assert registry.get_sample_value("tunelab_host_cpu_utilization_ratio") is None

    roots.h200_vm(root)  # the reading one second later
    source.sample(Cadence.FAST)
    # captured: cpu  119 0 521 44171 121 ... -> cpu  119 0 521 45775 121 ...: idle the whole second
    assert registry.get_sample_value("tunelab_host_cpu_utilization_ratio") == 0.0
    assert registry.get_sample_value("tunelab_host_cpus_online") == 16
    assert registry.get_sample_value("tunelab_host_load1") == 0.0
    assert registry.get_sample_value("tunelab_host_memory_total_bytes") == 131981020 * 1024
    assert registry.get_sample_value("tunelab_host_memory_available_bytes") == 131473888 * 1024
    assert registry.get_sample_value("tunelab_host_capability", {"name": "cpufreq"}) == 0
    assert registry.get_sample_value("tunelab_host_capability", {"name": "cpuidle"}) == 0
    names = {m.name for m in registry.collect()}
    assert not names & {
        "tunelab_host_cpu_governor_cpus",
        "tunelab_host_cpuidle_state_time_seconds",
        "tunelab_host_cpuidle_state_entries",
    }


def test_cpu_utilisation_is_the_busy_share_of_ticks_between_two_readings() -> None:
    before = parse_cpu_times("cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 1 2 3 4\n")
    after = parse_cpu_times("cpu  160 5 70 900 60 3 2 0 9 0\n")
    assert before is not None and after is not None
    # busy = user+nice+system+irq+softirq+steal (guest is inside user); idle+iowait are not busy
    assert cpu_utilization(before, after) == pytest.approx(80 / 200)
    assert cpu_utilization(after, after) is None


def test_cstate_residency_is_summed_over_cpus_in_seconds(tmp_path: Path) -> None:
    root = roots.xps13_cpuidle(tmp_path, cpus=2)
    roots.write(root, f"{CPU}/cpu1/cpuidle/state2/disable", "1")
    source = HostSource(System(root))
    source.sample(Cadence.SLOW)
    registry = collect(source)

    def value(name: str, state: str) -> float | None:
        return registry.get_sample_value(name, {"state": state})

    assert value("tunelab_host_cpuidle_state_time_seconds_total", "C1_ACPI") == pytest.approx(
        2 * 63.400881
    )
    assert value("tunelab_host_cpuidle_state_entries_total", "C3_ACPI") == 2 * 24205
    assert value("tunelab_host_cpuidle_state_disabled_cpus", "C2_ACPI") == 1
    assert value("tunelab_host_cpuidle_state_disabled_cpus", "C1_ACPI") == 0
    assert registry.get_sample_value("tunelab_host_capability", {"name": "cpuidle"}) == 1


def test_governors_are_counted_and_scaling_cur_freq_is_never_read(tmp_path: Path) -> None:
    root = roots.s18_cpufreq(tmp_path)
    roots.write(root, f"{CPU}/cpu0/cpufreq/scaling_governor", "performance")
    system = RecordingSystem(root)
    source = HostSource(system)
    for cadence in (Cadence.SLOW, Cadence.FAST, Cadence.FAST, Cadence.SLOW):
        source.sample(cadence)
    registry = collect(source)
    assert (
        registry.get_sample_value("tunelab_host_cpu_governor_cpus", {"governor": "powersave"}) == 5
    )
    assert (
        registry.get_sample_value("tunelab_host_cpu_governor_cpus", {"governor": "performance"})
        == 1
    )
    assert registry.get_sample_value("tunelab_host_capability", {"name": "cpufreq"}) == 1
    assert any(p.endswith("/scaling_governor") for p in system.paths)
    assert not [p for p in system.paths if "scaling_cur_freq" in p]


def test_a_garbled_proc_stat_fails_the_fast_cycle_and_keeps_memory_absent(tmp_path: Path) -> None:
    root = roots.h200_vm(tmp_path)
    (root / "proc" / "stat").write_text("cpu  12 x 3 4 5\n")
    source = HostSource(System(root))
    with pytest.raises(ValueError):
        source.sample(Cadence.FAST)
    registry = collect(source)
    assert registry.get_sample_value("tunelab_host_memory_total_bytes") is None
