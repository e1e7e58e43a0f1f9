"""Host polling: each agent is asked GetInfo on a jittered interval; the answer (or its absence)
decides READY / DRAINING / UNREACHABLE; QUARANTINED is lifted only by a person."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import structlog

from tunelab.controller.agent_client import AgentClient
from tunelab.controller.states import HostState
from tunelab.controller.store import HostRow, Store

log = structlog.get_logger(__name__)


def settled_state(host: HostRow) -> HostState:
    """The state a host that answers is in: a person's drain/quarantine wins over READY."""
    if host.quarantined:
        return HostState.QUARANTINED
    if host.drain:
        return HostState.DRAINING
    return HostState.READY


class HostMonitor:
    def __init__(
        self,
        store: Store,
        agents: AgentClient,
        interval: float = 5.0,
        unreachable_after: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._agents = agents
        self._interval = interval
        self._unreachable_after = unreachable_after
        self._clock = clock
        self._next_poll: dict[str, float] = {}

    def poll_due(self, pool: ThreadPoolExecutor, force: bool = False) -> None:
        now = self._clock()
        due = [
            h for h in self._store.list_hosts() if force or self._next_poll.get(h.name, 0.0) <= now
        ]
        for host in due:
            # jitter spreads polls of many hosts over the interval (0.8-1.0 of it)
            self._next_poll[host.name] = now + self._interval * random.uniform(0.8, 1.0)
        for future in [pool.submit(self.poll, h) for h in due]:
            future.result()

    def poll(self, host: HostRow) -> None:
        try:
            info = self._agents.get_info(host.address, host.token)
        except grpc.RpcError as exc:
            failures = host.failures + 1
            fields: dict[str, object] = {"failures": failures}
            if failures >= self._unreachable_after and not host.quarantined:
                reason = exc.details() or exc.code().name
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    reason = f"the agent refused the controller's token: {reason}"
                fields.update(
                    state=HostState.UNREACHABLE, state_reason=f"{failures} failed polls: {reason}"
                )
            self._store.update_host(host.name, **fields)
            return
        if info.instance_id != host.agent_instance_id and host.agent_instance_id:
            log.info("agent_restarted", host=host.name, instance_id=info.instance_id)
        self._store.update_host(
            host.name,
            state=settled_state(host),
            state_reason="" if not host.quarantined else host.state_reason,
            failures=0,
            last_seen=self._clock(),
            gpu_count=len(info.gpus),
            gpus=[
                {
                    "index": g.index,
                    "uuid": g.uuid,
                    "name": g.name,
                    "memory_total_bytes": g.memory_total_bytes,
                }
                for g in info.gpus
            ],
            agent_instance_id=info.instance_id,
            agent_version=info.version,
        )
