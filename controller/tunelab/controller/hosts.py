"""Host polling: each agent is asked GetInfo on a jittered interval, one poll per host in
flight at a time; the answer (or its absence) decides READY / DRAINING / UNREACHABLE through
``hoststate``. QUARANTINED is lifted only by a person. The runs an answering agent reports
active go to ``on_active_runs`` (the driver fences runs of attempts already declared over)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import grpc
import structlog

from tunelab.controller import hoststate
from tunelab.controller.agent_client import AgentClient
from tunelab.controller.inflight import InFlight, poll_key
from tunelab.controller.slurm.commands import is_slurm
from tunelab.controller.store import HostRow, Store
from tunelab.controller.store.changes import HostMove

log = structlog.get_logger(__name__)


class HostMonitor:
    def __init__(
        self,
        store: Store,
        agents: AgentClient,
        interval: float = 5.0,
        unreachable_after: int = 3,
        clock: Callable[[], float] = time.time,
        on_active_runs: Callable[[HostRow, list[str]], None] = lambda host, runs: None,
    ) -> None:
        self._store = store
        self._agents = agents
        self._interval = interval
        self._unreachable_after = unreachable_after
        self._clock = clock
        self._next_poll: dict[str, float] = {}
        self._on_active_runs = on_active_runs

    def poll_due(self, calls: InFlight | None = None, force: bool = False) -> None:
        """Start a poll of every host that is due and not already being polled; with no
        ``calls``, poll inline (tests)."""
        now = self._clock()
        for host in self._store.list_hosts():
            if is_slurm(host.address):
                continue  # a Slurm pool has no agent: Slurm's queue speaks for it
            if not force and self._next_poll.get(host.name, 0.0) > now:
                continue
            if calls is None:
                self.poll(host)
            elif not calls.start(poll_key(host.name), lambda h=host: self.poll(h)):  # type: ignore[misc]
                continue  # the last poll is still waiting on its deadline
            # jitter spreads polls of many hosts over the interval (0.8-1.0 of it)
            self._next_poll[host.name] = now + self._interval * random.uniform(0.8, 1.0)

    def poll(self, host: HostRow) -> None:
        try:
            info = self._agents.get_info(host.address, host.token)
        except grpc.RpcError as exc:
            reason = exc.details() or exc.code().name
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                reason = f"the agent refused the controller's token: {reason}"
            decide = hoststate.poll_failed(reason, self._unreachable_after)
            hoststate.change_host(self._store, host.name, decide, seen=host)
            return
        if info.instance_id != host.agent_instance_id and host.agent_instance_id:
            log.info("agent_restarted", host=host.name, instance_id=info.instance_id)
        observed: HostMove = {
            "gpu_count": len(info.gpus),
            "gpus": [
                {
                    "index": g.index,
                    "uuid": g.uuid,
                    "name": g.name,
                    "memory_total_bytes": g.memory_total_bytes,
                }
                for g in info.gpus
            ],
            "agent_instance_id": info.instance_id,
            "agent_version": info.version,
        }
        decide = hoststate.answered(observed, self._clock())
        fresh = hoststate.change_host(self._store, host.name, decide, seen=host)
        if fresh is not None and info.active_run_ids:
            self._on_active_runs(fresh, list(info.active_run_ids))
