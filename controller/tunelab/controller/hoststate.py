"""Every change of a host's state, as a decision over the row as last read, written by
compare-and-set (``Store.transition_host``, table ``states.HOST_TRANSITIONS``).

A write made from a stale read is refused by the store, and the decision is made again on the
fresh row: so a person's drain never undoes a quarantine the driver set meanwhile, and a poll
that took seconds never undoes a drain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tunelab.controller.states import HostState, settled_host_state
from tunelab.controller.store import HostRow, Store, StoreConflict
from tunelab.controller.store.changes import HostMove

CAS_TRIES = 8


@dataclass(frozen=True)
class HostChange:
    state: HostState
    fields: HostMove = field(default_factory=lambda: HostMove())


Decide = Callable[[HostRow], HostChange | None]  # None: nothing to write


def change_host(
    store: Store, name: str, decide: Decide, seen: HostRow | None = None
) -> HostRow | None:
    """Decide on ``seen`` (or a fresh read), compare-and-set; on a conflict read again and
    decide again. None when the host is gone."""
    for _ in range(CAS_TRIES):
        host, seen = seen or store.get_host(name), None
        if host is None:
            return None
        change = decide(host)
        if change is None:
            return host
        try:
            return store.transition_host(name, host, change.state, **change.fields)
        except StoreConflict:
            continue
    raise StoreConflict(f"host {name!r} kept changing under {CAS_TRIES} writes; try again")


def answered(observed: HostMove, now: float) -> Decide:
    """The agent answered GetInfo: settled by the flags; ``observed`` = GPUs, versions (no
    flag: those are a person's)."""

    def decide(host: HostRow) -> HostChange:
        state = settled_host_state(host.drain, host.quarantined)
        reason = host.state_reason if state is not HostState.READY else ""
        if state is HostState.DRAINING and host.state is not HostState.DRAINING:
            reason = "drained by a person"
        fields: HostMove = {**observed, "failures": 0, "last_seen": now, "state_reason": reason}
        return HostChange(state, fields)

    return decide


def poll_failed(reason: str, unreachable_after: int) -> Decide:
    """A poll got no answer: UNREACHABLE after ``unreachable_after`` in a row (a quarantined
    host stays QUARANTINED: only a person lifts it)."""

    def decide(host: HostRow) -> HostChange:
        failures = host.failures + 1
        if failures < unreachable_after or host.state is HostState.QUARANTINED:
            return HostChange(host.state, {"failures": failures})
        return HostChange(
            HostState.UNREACHABLE,
            {"failures": failures, "state_reason": f"{failures} failed polls: {reason}"},
        )

    return decide


def quarantine(reason: str) -> Decide:
    """A process survived the stop ladder: no more runs here until a person looks."""

    def decide(host: HostRow) -> HostChange | None:
        if host.quarantined:
            return None
        return HostChange(HostState.QUARANTINED, {"quarantined": True, "state_reason": reason})

    return decide


def drain(drained: bool, clear_quarantine: bool) -> Decide:
    """A person drains or undrains a host, and may lift its quarantine; an unreachable host
    keeps UNREACHABLE (its flags apply when it answers again)."""

    def decide(host: HostRow) -> HostChange:
        quarantined = host.quarantined and not clear_quarantine
        fields: HostMove = {"drain": drained, "quarantined": quarantined}
        if host.state is HostState.UNREACHABLE and not quarantined:
            return HostChange(HostState.UNREACHABLE, fields)
        state = settled_host_state(drained, quarantined)
        if state is HostState.DRAINING:
            fields["state_reason"] = "drained by a person"
        elif state is HostState.READY:
            fields["state_reason"] = ""
        return HostChange(state, fields)

    return decide
