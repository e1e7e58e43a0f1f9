"""Host metrics from /proc and /sys, read through ``System`` (the audit's root path).

Fast cadence: /proc/stat (CPU utilisation over the last interval), /proc/loadavg, /proc/meminfo.
Slow cadence: CPUs per scaling governor and C-state (cpuidle) residency summed over CPUs. The
per-CPU ``scaling_cur_freq`` is never read: on ACPI systems each read is an SMM round trip
(~20 ms per core), which would perturb the benchmark being measured.

Everything goes through the root path so the same code runs against a captured tree; psutil
cannot be pointed at one, which is why /proc is parsed here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from prometheus_client.core import Metric

from tunelab.agent.gpu import Cadence
from tunelab.agent.metrics.families import FamilyCollector, counter, gauge
from tunelab.agent.system import System

CPU_DIR = "/sys/devices/system/cpu"


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate ``cpu`` line of /proc/stat, in clock ticks."""

    busy: int
    total: int


@dataclass(frozen=True)
class IdleState:
    """One C-state summed over CPUs: residency (µs), entries, and CPUs that disabled it."""

    time_us: int = 0
    entries: int = 0
    disabled_cpus: int = 0


@dataclass(frozen=True)
class HostSample:
    cpu_utilization: float | None = None
    load: tuple[float, float, float] | None = None
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    online_cpus: int | None = None
    governors: dict[str, int] = field(default_factory=dict)
    idle_states: dict[str, IdleState] = field(default_factory=dict)


class HostSource:
    name = "host"
    cadences = frozenset({Cadence.FAST, Cadence.SLOW})

    def __init__(self, system: System) -> None:
        self.system = system
        self.latest = HostSample()
        self._last_cpu: CpuTimes | None = None

    def sample(self, cadence: Cadence) -> None:
        if cadence is Cadence.FAST:
            self._sample_fast()
        elif cadence is Cadence.SLOW:
            self._sample_slow()

    def _sample_fast(self) -> None:
        times = parse_cpu_times(self.system.read_text("/proc/stat"))
        utilization = None
        if times is not None and self._last_cpu is not None:
            utilization = cpu_utilization(self._last_cpu, times)
        self._last_cpu = times
        meminfo = parse_meminfo(self.system.read_text("/proc/meminfo") or "")
        total = meminfo.get("MemTotal")
        available = meminfo.get("MemAvailable")
        self.latest = replace(
            self.latest,
            cpu_utilization=utilization,
            load=parse_loadavg(self.system.read_text("/proc/loadavg")),
            memory_total_bytes=None if total is None else total * 1024,
            memory_available_bytes=None if available is None else available * 1024,
        )

    def _sample_slow(self) -> None:
        cpus = self.system.online_cpus()
        governors: Counter[str] = Counter()
        states: dict[str, IdleState] = {}
        for cpu in cpus:
            governor = self.system.read_line(f"{CPU_DIR}/cpu{cpu}/cpufreq/scaling_governor")
            if governor:
                governors[governor] += 1
            for entry in self.system.listdir(f"{CPU_DIR}/cpu{cpu}/cpuidle"):
                if not entry.startswith("state"):
                    continue
                base = f"{CPU_DIR}/cpu{cpu}/cpuidle/{entry}"
                name = self.system.read_line(f"{base}/name") or entry
                seen = states.get(name, IdleState())
                states[name] = IdleState(
                    time_us=seen.time_us + (self.system.read_int(f"{base}/time") or 0),
                    entries=seen.entries + (self.system.read_int(f"{base}/usage") or 0),
                    disabled_cpus=seen.disabled_cpus
                    + (1 if self.system.read_int(f"{base}/disable") else 0),
                )
        self.latest = replace(
            self.latest,
            online_cpus=len(cpus) or None,
            governors=dict(governors),
            idle_states=states,
        )


def parse_cpu_times(text: str | None) -> CpuTimes | None:
    """The first (aggregate) line of /proc/stat; guest time is already inside user time."""
    if not text:
        return None
    first = text.split("\n", 1)[0].split()
    if len(first) < 5 or first[0] != "cpu":
        return None
    ticks = [int(v) for v in first[1:9]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    total = sum(ticks)
    return CpuTimes(busy=total - idle, total=total)


def cpu_utilization(before: CpuTimes, after: CpuTimes) -> float | None:
    """Share of CPU time spent busy between two readings, 0-1 (None if no time passed)."""
    elapsed = after.total - before.total
    if elapsed <= 0:
        return None
    return min(1.0, max(0.0, (after.busy - before.busy) / elapsed))


def parse_loadavg(text: str | None) -> tuple[float, float, float] | None:
    parts = (text or "").split()
    if len(parts) < 3:
        return None
    return float(parts[0]), float(parts[1]), float(parts[2])


def parse_meminfo(text: str) -> dict[str, int]:
    """``Key: value kB`` lines as kB integers."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        number = rest.split()
        if number and number[0].isdigit():
            values[key.strip()] = int(number[0])
    return values


GOVERNOR = gauge("tunelab_host_cpu_governor_cpus", "Online CPUs per cpufreq governor.", "governor")
IDLE_TIME = counter(
    "tunelab_host_cpuidle_state_time_seconds_total",
    "Time CPUs spent in this C-state, summed over CPUs (slow cadence).",
    "state",
)
IDLE_ENTRIES = counter(
    "tunelab_host_cpuidle_state_entries_total",
    "Entries into this C-state, summed over CPUs (slow cadence).",
    "state",
)
IDLE_DISABLED = gauge(
    "tunelab_host_cpuidle_state_disabled_cpus", "CPUs on which this C-state is disabled.", "state"
)


class HostCollector(FamilyCollector):
    families = (
        gauge("tunelab_host_cpu_utilization_ratio", "CPU busy share over the last interval, 0-1."),
        gauge("tunelab_host_cpus_online", "Online CPUs."),
        gauge("tunelab_host_load1", "1-minute load average."),
        gauge("tunelab_host_load5", "5-minute load average."),
        gauge("tunelab_host_load15", "15-minute load average."),
        gauge("tunelab_host_memory_total_bytes", "MemTotal."),
        gauge("tunelab_host_memory_available_bytes", "MemAvailable."),
        GOVERNOR,
        IDLE_TIME,
        IDLE_ENTRIES,
        IDLE_DISABLED,
        gauge(
            "tunelab_host_capability",
            "1 when the host exposes the interface (cpufreq, cpuidle); 0 explains absent series.",
            "name",
        ),
    )

    def __init__(self, source: HostSource) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        host = self._source.latest
        out = self.samples()
        out.add("tunelab_host_cpu_utilization_ratio", [], host.cpu_utilization)
        out.add("tunelab_host_cpus_online", [], host.online_cpus)
        if host.load is not None:
            for window, value in zip(("1", "5", "15"), host.load, strict=True):
                out.add(f"tunelab_host_load{window}", [], value)
        out.add("tunelab_host_memory_total_bytes", [], host.memory_total_bytes)
        out.add("tunelab_host_memory_available_bytes", [], host.memory_available_bytes)
        for governor, cpus in sorted(host.governors.items()):
            out.add(GOVERNOR.name, [governor], cpus)
        for state, idle in host.idle_states.items():
            out.add(IDLE_TIME.name, [state], idle.time_us / 1e6)
            out.add(IDLE_ENTRIES.name, [state], idle.entries)
            out.add(IDLE_DISABLED.name, [state], idle.disabled_cpus)
        if host.online_cpus is not None:  # known once the slow cycle ran
            out.add("tunelab_host_capability", ["cpufreq"], 1 if host.governors else 0)
            out.add("tunelab_host_capability", ["cpuidle"], 1 if host.idle_states else 0)
        return out.families()
