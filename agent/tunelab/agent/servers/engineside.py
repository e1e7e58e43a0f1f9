"""The engine side of supervising one server, behind a few calls the supervisor makes:
``on_log`` per log chunk, ``probe`` in its loop, ``on_scan`` with the processes it found,
``on_ready`` / ``on_exit`` / ``on_timeout`` / ``after_stop`` at those events. Each returns the
record fields to update, so the supervisor stays the only writer of the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from tunelab.agent.engines.failures import Failure
from tunelab.agent.engines.leftovers import LeftoverTracker
from tunelab.agent.engines.oomkill import monotonic_of, oom_killed
from tunelab.agent.engines.phases import Phase
from tunelab.agent.engines.profiles import profile_for
from tunelab.agent.engines.watch import EngineWatch
from tunelab.agent.servers.probe import ProbeResult, ReadinessProbe, probe_ready
from tunelab.agent.servers.record import ServerChanges, ServerRecord

ELSEWHERE_INTERVAL = 1.0  # port_mismatch asks the port the log named at most this often


class EngineSupervision:
    def __init__(
        self,
        record: ServerRecord,
        adopted: bool,
        fast_interval: float,
        probe: Callable[[int, str, str], ProbeResult] = probe_ready,
    ) -> None:
        spec = record.spec
        self.profile = profile_for(spec.engine, spec.argv)
        started = record.started_at or time.time()
        if adopted and record.engine.engine:
            self.watch = EngineWatch.resumed(self.profile, record.engine)
        else:
            self.watch = EngineWatch(self.profile, started)
        self.probe_state = ReadinessProbe(
            spec.port, spec.ready_path, spec.ready_model, fast=fast_interval
        )
        self.probe_state.http_requests = record.engine.http_probes if adopted else 0
        self.leftovers = LeftoverTracker(started, snapshot=not adopted)
        self._started = started
        self._probe = probe
        self._elsewhere_next = 0.0  # port_mismatch: when to ask the other port again
        self._elsewhere_ready = False

    # --- while starting --------------------------------------------------------------------------
    def on_log(self, data: bytes, now: float) -> ServerChanges | None:
        """Feed a log chunk; the fields to update when phase or progress changed."""
        update = self.watch.feed(data, now)
        if update.ready_hint:
            self.probe_state.nudge()
        return self._fields() if update.changed else None

    def probe(self) -> ProbeResult | None:
        return self.probe_state.poll()

    def port_mismatch(self, now: float) -> str:
        """Why the probe will never see this server ready: its log says it listens on another
        port than the probed one, and its ready path answers 2xx there ("" otherwise: a port
        in the log that is not the server's, a metrics exporter's, is no reason). Asked at
        most once a second."""
        said = self.watch.listening
        port = self.probe_state.port
        if said is None or said[0] == port or self.probe_state.last.ready:
            return ""
        if now >= self._elsewhere_next:
            self._elsewhere_next = now + ELSEWHERE_INTERVAL
            self._elsewhere_ready = self._probe(said[0], self.probe_state.path, "").ready
        if not self._elsewhere_ready:
            return ""
        return (
            f"the server is ready on port {said[0]} (its log: {said[1]!r}), but the readiness "
            f"probe uses port {port}: give both the same port (server start --port, "
            'server.port, "{port}" in the server\'s flags)'
        )

    def probe_detail(self) -> str:
        return self.probe_state.last.detail

    def label(self) -> str:
        """What a person sees beside LOADING: the phase, and the bar's label when it has one."""
        status, progress = self.watch.snapshot()
        phase = status.phase.value.replace("_", " ").lower()
        return (
            f"{phase}: {progress.label}" if progress and progress.phase == status.phase else phase
        )

    def on_ready(self, now: float) -> ServerChanges:
        self.watch.ready(now)
        return self._fields()

    # --- processes -------------------------------------------------------------------------------
    def on_scan(self, pids: Iterable[int]) -> None:
        self.leftovers.scan(pids)

    def after_stop(self) -> ServerChanges:
        """Every process is gone: remove the files they left; the fields to update."""
        removed = self.leftovers.remove()
        self.watch.status.leftovers_removed.extend(removed)
        return self._fields()

    # --- failures --------------------------------------------------------------------------------
    def on_exit(
        self, exit_code: int | None, tail: list[str], pids: Iterable[int]
    ) -> tuple[Failure, ServerChanges]:
        killed = oom_killed(pids, monotonic_of(self._started))
        failure = self.watch.failed(exit_code, tail, killed)
        return failure, self._fields()

    def on_timeout(self, tail: list[str], detail: str) -> tuple[Failure, ServerChanges]:
        failure = self.watch.timed_out(tail, detail)
        return failure, self._fields()

    def _fields(self) -> ServerChanges:
        status, progress = self.watch.snapshot()
        status.http_probes = self.probe_state.http_requests
        fields: ServerChanges = {"engine": status}
        if progress is not None:
            fields["progress"] = progress
        return fields

    @property
    def phase(self) -> Phase:
        return self.watch.status.phase
