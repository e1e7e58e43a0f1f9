"""What the timeline reads from the GPUs (through ``agent.gpu``, the one NVML wrapper) and from
the host (through ``agent.system``, the one procfs reader), one call per tick.

GPU fields that the GPU does not support, or whose read fails, are None for that tick. Host CPU
shares are over the time since the previous tick: all CPUs, the busiest one, each of the first
:data:`MAX_CORES`, steal (a VM's stolen time), and the load generator's own process (its share
of one core, and the core it last ran on), since a client that runs out of CPU measures itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tunelab.agent.gpu import GpuBackend, GpuError, as_float
from tunelab.agent.system import System
from tunelab.bench.timeline.document import MAX_CORES

GPU_FIELDS = (
    "power_watts",
    "sm_clock_hertz",
    "memory_clock_hertz",
    "temperature_celsius",
    "utilization_ratio",
    "memory_used_bytes",
    "clock_event_reasons",
)
GPU_STATIC = ("power_limit_watts", "sm_clock_max_hertz", "memory_clock_max_hertz", "name")
MAX_GPUS = 16


def read_gpus(backend: GpuBackend) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    if not backend.available():
        return values
    try:
        count = min(backend.device_count(), MAX_GPUS)
    except GpuError:
        return values
    for index in range(count):
        for name in GPU_FIELDS:
            try:
                values[f"gpu{index}.{name}"] = as_float(backend.read(index, name))
            except GpuError:
                values[f"gpu{index}.{name}"] = None
    return values


def gpu_facts(backend: GpuBackend) -> list[dict[str, float | str | None]]:
    """Each GPU's limits, read once: what "at the cap" and "throttled" are judged against."""
    if not backend.available():
        return []
    facts: list[dict[str, float | str | None]] = []
    try:
        count = min(backend.device_count(), MAX_GPUS)
    except GpuError:
        return facts
    for index in range(count):
        row: dict[str, float | str | None] = {}
        for name in GPU_STATIC:
            try:
                value = backend.read(index, name)
            except GpuError:
                value = None
            row[name] = value if isinstance(value, str) else as_float(value)
        facts.append(row)
    return facts


@dataclass
class _Times:
    busy: int
    total: int
    steal: int


@dataclass
class HostProbe:
    """CPU shares since the last call, from /proc/stat and /proc/<client pid>/stat."""

    system: System
    client_pid: int | None = None
    ticks_per_second: int = 100
    _cpus: dict[str, _Times] = field(default_factory=dict)
    _client: tuple[float, float, float] | None = None  # (cpu s, run-queue wait s, clock)

    def read(self, now: float) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        text = self.system.read_text("/proc/stat") or ""
        busiest: float | None = None
        for line in text.splitlines():
            if not line.startswith("cpu"):
                continue
            name, *fields = line.split()
            try:
                numbers = [int(x) for x in fields[:8]]
            except ValueError:
                continue
            if len(numbers) < 8:
                continue
            idle = numbers[3] + numbers[4]
            total = sum(numbers)
            times = _Times(total - idle, total, numbers[7])
            before = self._cpus.get(name)
            self._cpus[name] = times
            if before is None or times.total <= before.total:
                continue
            span = times.total - before.total
            share = (times.busy - before.busy) / span
            if name == "cpu":
                values["host.cpu_ratio"] = share
                values["host.steal_ratio"] = (times.steal - before.steal) / span
                continue
            busiest = share if busiest is None else max(busiest, share)
            core = name[3:]
            if core.isdigit() and int(core) < MAX_CORES:
                values[f"host.cpu{core}_ratio"] = share
        values["host.cpu_max_ratio"] = busiest
        values.update(self._client_share(now))
        return values

    def _client_share(self, now: float) -> dict[str, float | None]:
        if self.client_pid is None:
            return {}
        text = self.system.read_text(f"/proc/{self.client_pid}/stat")
        if not text or ")" not in text:
            self._client = None
            return {"host.client_cpu_ratio": None}
        rest = text.rsplit(")", 1)[1].split()
        try:  # fields after the name: state is [0]; utime [11], stime [12], processor [36]
            cpu = (int(rest[11]) + int(rest[12])) / self.ticks_per_second
            core = float(rest[36]) if len(rest) > 36 else None
        except (IndexError, ValueError):
            return {"host.client_cpu_ratio": None}
        # /proc/<pid>/schedstat: on-CPU ns, run-queue wait ns, timeslices (the client is
        # starved when it waits for a CPU: the self-check's max_client_runqueue)
        sched = (self.system.read_text(f"/proc/{self.client_pid}/schedstat") or "").split()
        wait = int(sched[1]) / 1e9 if len(sched) > 1 and sched[1].isdigit() else None
        before, self._client = self._client, (cpu, wait if wait is not None else -1.0, now)
        share = waited = None
        if before is not None and now > before[2]:
            share = (cpu - before[0]) / (now - before[2])
            if wait is not None and before[1] >= 0:
                waited = (wait - before[1]) / (now - before[2])
        return {
            "host.client_cpu_ratio": share,
            "host.client_wait_ratio": waited,
            "host.client_core": core,
        }
