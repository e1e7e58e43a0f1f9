"""The scheduling pass: queued experiments → hosts, by priority then submission order.

One run at a time per host, or per disjoint GPU set when a spec asks for fewer GPUs than the
host has. Each placement is committed (an attempt in DISPATCHING) before any agent is called:
the pass commits its placements in chunks of ``COMMIT_CHUNK`` and hands each chunk on as soon as
it is committed, so the first StartRun of a wide pass leaves while later chunks commit.
The pass touches only the head of each host selector's queue, so its cost follows the number
of placements and distinct selectors, not the queue's length.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from tunelab.controller.states import HostState
from tunelab.controller.store import AttemptRow, ExperimentRow, FencingToken, HostRow, Store


@dataclass
class Occupancy:
    """Which GPUs of which hosts live attempts hold (whole-host attempts hold everything)."""

    gpus: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    whole: set[str] = field(default_factory=set)
    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def full(self, host: str, gpu_count: int) -> bool:
        """Nothing more fits: a whole-host run holds it, or every GPU is taken."""
        return host in self.whole or (gpu_count > 0 and len(self.gpus[host]) >= gpu_count)

    def add(self, host: str, gpus: list[int], pooled: bool = False) -> None:
        self.count[host] += 1
        if pooled:
            return  # a Slurm pool: counted only (max_jobs), never held whole
        if gpus:
            self.gpus[host].update(gpus)
        else:
            self.whole.add(host)


def matches(selector: Mapping[str, Any], host: HostRow) -> bool:
    """Name equality, labels a subset of the host's, and enough GPUs on the host."""
    name = str(selector.get("name") or "")
    if name and name != host.name:
        return False
    labels: Mapping[str, str] = selector.get("labels") or {}
    if any(host.labels.get(k) != v for k, v in labels.items()):
        return False
    return int(selector.get("gpus") or 0) <= host.gpu_count


def place(
    experiment: ExperimentRow,
    hosts: list[HostRow],
    busy: Occupancy,
    pools: Mapping[str, int] | None = None,
) -> tuple[str, list[int]] | None:
    """A host (and GPU indices) for ``experiment`` now, or None. Hosts the experiment was lost
    on are used only when no other host fits; among equals, the least loaded host wins. A
    Slurm pool (in ``pools``: name → max_jobs) takes attempts up to its max_jobs, with no GPU
    indices: Slurm grants the GPUs."""
    needed = experiment.gpus_needed
    pools = pools or {}
    options: list[tuple[bool, int, str, list[int]]] = []
    for host in hosts:  # already filtered by matches()
        if host.name in busy.whole:
            continue
        if host.name in pools:
            if busy.count[host.name] >= pools[host.name]:
                continue
            gpus: list[int] = []
        elif needed == 0:
            if busy.count[host.name]:
                continue
            gpus = []
        else:
            free = [i for i in range(host.gpu_count) if i not in busy.gpus[host.name]]
            if len(free) < needed:
                continue
            gpus = free[:needed]
        option = (host.name in experiment.avoid_hosts, busy.count[host.name], host.name, gpus)
        if not option[0] and option[1] == 0:
            return host.name, gpus  # idle, never lost here, first by name: nothing beats it
        options.append(option)
    if not options:
        return None
    _, _, name, gpus = min(options)
    return name, gpus


PREFETCH = 64
# placements per commit: each chunk's StartRuns leave as it commits; before, a 200-wide pass
# committed everything first, and its last call left ~100 ms after the intent (issue 22)
COMMIT_CHUNK = 25


@dataclass(frozen=True)
class Placed:
    """One committed chunk of a pass's decisions, as the pass hands it on: the attempts made,
    the spec each runs (by experiment id) and the hosts as the pass read them (by name)."""

    attempts: list[AttemptRow]
    specs: Mapping[str, dict[str, Any]]
    hosts: Mapping[str, HostRow]


Created = Callable[[Placed], None]


class Scheduler:
    def __init__(
        self,
        store: Store,
        clock: Callable[[], float] = time.time,
        pools: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self._store = store
        self._clock = clock
        self._pools = pools  # Slurm pools: name -> max_jobs

    def _following(
        self, current: ExperimentRow, buffers: dict[str, deque[ExperimentRow]]
    ) -> ExperimentRow | None:
        """The experiment queued after ``current`` in its selector's order, read in batches."""
        buffer = buffers.setdefault(current.selector_key, deque())
        if not buffer:
            buffer.extend(
                self._store.queued_after(
                    current.selector_key, (current.priority, current.seq), PREFETCH
                )
            )
        return buffer.popleft() if buffer else None

    @staticmethod
    def _why_waiting(head: ExperimentRow, registered: list[HostRow]) -> str:
        """Why a selector's queue waits: no such host at all, or none free right now."""
        matching = [h for h in registered if matches(head.selector, h)]
        usable = [h for h in matching if h.state is HostState.READY and not h.drain]
        if usable:
            why = "waiting for a free host"
        elif matching:
            states = ", ".join(
                f"{h.name} {'DRAINING' if h.drain else h.state.value}"
                + (f" ({h.state_reason})" if h.state_reason and not h.drain else "")
                for h in matching
            )
            why = f"waiting: no matching host can take runs now: {states} (tunelab hosts ls)"
        else:
            selector = head.selector
            wanted = selector.get("name") or selector.get("labels") or "any host"
            gpus = f" with {selector['gpus']} GPUs" if selector.get("gpus") else ""
            why = f"waiting: no registered host matches {wanted}{gpus} (tunelab hosts add)"
        return why

    def turn(self) -> AbstractContextManager[FencingToken | None]:
        """This controller's turn to schedule and dispatch (always, with SQLite): a token for
        the pass's commit, or None while another controller holds the turn."""
        return self._store.scheduling_pass()

    def pass_once(
        self, turn: FencingToken | None = None, created: Created | None = None
    ) -> list[AttemptRow]:
        """Place as many queued experiments as free hosts allow; returns the new attempts.
        ``turn`` is the token of the turn this pass runs in (the control loop takes one per
        tick); without one the pass takes its own, and places nothing while another
        controller holds the turn. ``created`` gets each committed chunk at once (the
        control loop sends its StartRuns from there)."""
        if turn is not None:
            return self._pass(turn, created)
        with self._store.scheduling_pass() as own:
            return self._pass(own, created) if own is not None else []

    def _pass(self, turn: FencingToken, created: Created | None) -> list[AttemptRow]:
        registered = self._store.list_hosts()
        hosts = [h for h in registered if h.state.takes_work()]
        hosts_by_name = {h.name: h for h in hosts}
        busy = Occupancy()
        pools = self._pools()
        for attempt in self._store.live_attempts():
            busy.add(attempt.host, attempt.gpus, attempt.host in pools)
        heap = [(-e.priority, e.seq, e) for e in self._store.queued_heads()]
        heapq.heapify(heap)
        plan: list[tuple[str, str, list[int]]] = []
        specs: dict[str, dict[str, Any]] = {}
        candidates: dict[str, list[HostRow]] = {}  # per selector: the hosts it may use at all
        buffers: dict[str, deque[ExperimentRow]] = {}  # per selector: the next queued, prefetched
        waits: dict[str, str] = {}  # per selector whose queue waits: why
        while heap:
            _, _, experiment = heapq.heappop(heap)
            fitting = candidates.get(experiment.selector_key)
            if fitting is None:
                fitting = [h for h in hosts if matches(experiment.selector, h)]
                candidates[experiment.selector_key] = fitting
            spot = None if experiment.cancel_requested else place(experiment, fitting, busy, pools)
            if spot is None and not experiment.cancel_requested:
                waits[experiment.selector_key] = self._why_waiting(experiment, registered)
                continue  # nothing fits this selector now; its later entries would not fit either
            if spot is not None:
                host, gpus = spot
                plan.append((experiment.id, host, gpus))
                specs[experiment.id] = experiment.spec
                busy.add(host, gpus, host in pools)
                full = (
                    busy.count[host] >= pools[host]
                    if host in pools
                    else busy.full(host, hosts_by_name[host].gpu_count)
                )
                if full:  # no selector can use it now
                    for fitting_hosts in candidates.values():
                        fitting_hosts[:] = [h for h in fitting_hosts if h.name != host]
            following = self._following(experiment, buffers)
            if following is not None:
                heapq.heappush(heap, (-following.priority, following.seq, following))
        # the waits first: should that write fail, the pass has placed nothing and is done again
        self._store.set_queue_waits(waits)
        read = {h.name: h for h in registered}
        return self._commit(plan, turn, created, specs, read)

    def _commit(
        self,
        plan: list[tuple[str, str, list[int]]],
        turn: FencingToken,
        created: Created | None,
        specs: Mapping[str, dict[str, Any]],
        hosts: Mapping[str, HostRow],
    ) -> list[AttemptRow]:
        """Commit the placements chunk by chunk, each under the turn's fence and stamped with
        its own commit time, handing each on before the next commits. Should a later chunk
        fail (the turn lost, the database away), the chunks before it stand: their intent is
        on disk and their StartRuns are idempotent; the rest stay queued for the next pass."""
        made: list[AttemptRow] = []
        for first in range(0, len(plan), COMMIT_CHUNK):
            chunk = self._store.create_attempts(
                plan[first : first + COMMIT_CHUNK], self._clock(), turn
            )
            made += chunk
            if chunk and created is not None:
                created(Placed(chunk, specs, hosts))
        return made
