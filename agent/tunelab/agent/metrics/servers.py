"""Inference-server metrics: lifecycle state, load progress, time to READY, restarts, GPU memory.

The ``server`` label is the server's name, and only servers that exist appear: every live one,
plus finished ones for ``FINISHED_RETENTION`` seconds so that a FAILED state reaches Prometheus
before the series goes away. GPU memory is attributed by matching NVML's compute processes to
each live server's recorded processes by pid *and* create time, so a pid the kernel reused for a
stranger is never counted as the server's.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import Metric

from tunelab.agent.engines.failures import FailureReason
from tunelab.agent.engines.phases import Phase
from tunelab.agent.gpu import Cadence, GpuProcess
from tunelab.agent.metrics.families import FamilyCollector, counter, gauge, info
from tunelab.agent.procs.process import ProcessId
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.states import ServerState

FINISHED_RETENTION = 300.0
MAX_FINISHED = 32

ListServers = Callable[[bool], Sequence[ServerRecord]]  # ServerRegistry.servers(include_finished)


@dataclass(frozen=True)
class ServerView:
    """What the metrics need of one server."""

    id: str
    name: str
    state: ServerState
    port: int
    progress_ratio: float | None
    ready_seconds: float | None
    adoptions: int
    finished_at: float
    phase: Phase = Phase.IMPORTING
    phase_seconds: tuple[tuple[Phase, float], ...] = ()  # closed phases and their durations
    failure_reason: str = ""

    @classmethod
    def of(cls, record: ServerRecord) -> ServerView:
        return cls(
            id=record.id,
            name=record.name,
            state=record.state,
            port=record.spec.port,
            progress_ratio=record.progress.ratio if record.progress else None,
            ready_seconds=record.ready_seconds or None,
            adoptions=record.adoptions,
            finished_at=record.finished_at,
            phase=record.engine.phase,
            phase_seconds=_phase_totals(record),
            failure_reason=record.engine.failure_reason,
        )


def _phase_totals(record: ServerRecord) -> tuple[tuple[Phase, float], ...]:
    """Seconds per phase; a phase entered twice (compile between captures) is summed."""
    totals: dict[Phase, float] = {}
    for span in record.engine.phases:
        if span.seconds:
            totals[span.phase] = totals.get(span.phase, 0.0) + span.seconds
    return tuple(totals.items())


@dataclass(frozen=True)
class ServersSample:
    servers: tuple[ServerView, ...] = ()  # one per name: the live one, else the latest finished
    starts: Mapping[str, int] = field(default_factory=dict)  # records ever started, by name
    gpu_memory: Mapping[str, Mapping[int, int]] = field(default_factory=dict)  # id -> gpu -> bytes


class ServerSource:
    """Reads the registry every fast tick (live servers) and all records when the set changes."""

    name = "servers"
    cadences = frozenset({Cadence.FAST, Cadence.SLOW})

    def __init__(
        self,
        list_servers: ListServers,
        processes: Callable[[], Sequence[GpuProcess]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._list = list_servers
        self._processes = processes
        self._clock = clock
        self._finished: tuple[ServerView, ...] = ()
        self._starts: dict[str, int] = {}
        self._live_ids: frozenset[str] | None = None
        self.latest = ServersSample()

    def sample(self, cadence: Cadence) -> None:
        live = list(self._list(False))
        ids = frozenset(r.id for r in live)
        if cadence is Cadence.SLOW or ids != self._live_ids:
            self._refresh_all(self._list(True))
        self._live_ids = ids
        views = {r.name: ServerView.of(r) for r in live}
        for view in self._finished:
            views.setdefault(view.name, view)
        self.latest = ServersSample(
            servers=tuple(views.values()),
            starts=dict(self._starts),
            gpu_memory=attribute_gpu_memory(live, self._processes()),
        )

    def _refresh_all(self, records: Iterable[ServerRecord]) -> None:
        horizon = self._clock() - FINISHED_RETENTION
        starts: Counter[str] = Counter()
        finished: list[ServerView] = []
        for record in records:
            starts[record.name] += 1
            if record.state.is_terminal() and record.finished_at >= horizon:
                finished.append(ServerView.of(record))
        finished.sort(key=lambda v: v.finished_at, reverse=True)
        self._finished = tuple(finished[:MAX_FINISHED])
        self._starts = dict(starts)

    def gpu_memory_by_server(self) -> dict[str, int]:
        """Bytes of GPU memory per server id (for the gRPC Server message)."""
        return {sid: sum(per_gpu.values()) for sid, per_gpu in self.latest.gpu_memory.items()}


def attribute_gpu_memory(
    servers: Iterable[ServerRecord], processes: Iterable[GpuProcess]
) -> dict[str, dict[int, int]]:
    """GPU memory per server id and GPU index, from processes that are provably the server's."""
    owners: dict[int, tuple[str, ProcessId]] = {}
    for record in servers:
        for pid in record.process_ids():
            owners[pid.pid] = (record.id, pid)
    memory: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
    for proc in processes:
        owner = owners.get(proc.pid)
        if owner is None or proc.used_memory_bytes is None:
            continue
        server_id, identity = owner
        if identity.alive():  # same pid and create time: not a stranger with a reused pid
            memory[server_id][proc.gpu_index] += proc.used_memory_bytes
    return {sid: dict(per_gpu) for sid, per_gpu in memory.items()}


STATE = gauge(
    "tunelab_server_state", "1 for the server's current lifecycle state.", "server", "state"
)
PHASE = gauge(
    "tunelab_server_phase", "1 for the server's current start-up phase.", "server", "phase"
)
FAILURE = gauge(
    "tunelab_server_failure_reason", "1 for the reason a FAILED server failed.", "server", "reason"
)


class ServerCollector(FamilyCollector):
    families = (
        info(
            "tunelab_server_info",
            "Server identity: current id and port.",
            "server",
            "server_id",
            "port",
        ),
        STATE,
        PHASE,
        gauge(
            "tunelab_server_phase_duration_seconds",
            "How long each finished start-up phase took (last launch).",
            "server",
            "phase",
        ),
        FAILURE,
        gauge(
            "tunelab_server_load_progress_ratio",
            "Checkpoint loading progress parsed from the log, 0-1.",
            "server",
        ),
        gauge("tunelab_server_time_to_ready_seconds", "Launch to READY.", "server"),
        counter(
            "tunelab_server_restarts_total",
            "Times a server of this name was started again.",
            "server",
        ),
        counter(
            "tunelab_server_adoptions_total",
            "Times a restarted agent re-adopted this server.",
            "server",
        ),
        gauge(
            "tunelab_server_gpu_memory_bytes",
            "GPU memory held by the server's processes (NVML), per GPU.",
            "server",
            "gpu",
        ),
    )

    def __init__(self, source: ServerSource) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        sample = self._source.latest
        out = self.samples()
        for server in sample.servers:
            name = [server.name]
            out.add("tunelab_server_info", [server.name, server.id, str(server.port)], 1)
            for state in ServerState:
                out.add(STATE.name, [server.name, state.value], 1 if state is server.state else 0)
            for phase in Phase:
                out.add(PHASE.name, [server.name, phase.value], 1 if phase is server.phase else 0)
            for phase, seconds in server.phase_seconds:
                out.add(
                    "tunelab_server_phase_duration_seconds", [server.name, phase.value], seconds
                )
            if server.failure_reason:
                for reason in FailureReason:
                    hit = 1 if reason.value == server.failure_reason else 0
                    out.add(FAILURE.name, [server.name, reason.value], hit)
            out.add("tunelab_server_load_progress_ratio", name, server.progress_ratio)
            out.add("tunelab_server_time_to_ready_seconds", name, server.ready_seconds)
            out.add(
                "tunelab_server_restarts_total", name, max(0, sample.starts.get(server.name, 1) - 1)
            )
            out.add("tunelab_server_adoptions_total", name, server.adoptions)
            if not server.state.is_terminal():
                for gpu, used in sorted(sample.gpu_memory.get(server.id, {}).items()):
                    out.add("tunelab_server_gpu_memory_bytes", [server.name, str(gpu)], used)
        return out.families()
