"""What every WatchExperiment stream reads, shared: however many streams watch one experiment
(a team following one `submit --wait`), it is read from the store and encoded at most once per
``max_age``. Without this, 200 watchers are 400 store reads a second that unary calls queue
behind (benchmarks/stream_load.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tunelab.v1 import controller_pb2

PRUNE_AFTER = 60.0  # an entry nobody asked for this long is dropped


@dataclass(frozen=True)
class Snapshot:
    message: controller_pb2.Experiment
    encoded: bytes  # deterministic: equal bytes = nothing new to send
    terminal: bool
    at: float


class WatchCache:
    def __init__(
        self,
        read: Callable[[str], tuple[controller_pb2.Experiment, bool] | None],
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read  # experiment id -> (message, terminal), None when gone
        self._max_age = max_age
        self._clock = clock
        self._entries: dict[str, Snapshot] = {}
        self._lock = threading.Lock()
        self._last_prune = clock()

    def get(self, experiment_id: str) -> Snapshot | None:
        now = self._clock()
        with self._lock:
            hit = self._entries.get(experiment_id)
            if hit is not None and now - hit.at < self._max_age:
                return hit
        read = self._read(experiment_id)  # outside the lock: a slow read holds up no other id
        if read is None:
            return None
        message, terminal = read
        snapshot = Snapshot(message, message.SerializeToString(deterministic=True), terminal, now)
        with self._lock:
            self._entries[experiment_id] = snapshot
            if now - self._last_prune > PRUNE_AFTER:
                self._last_prune = now
                for key in [k for k, v in self._entries.items() if now - v.at > PRUNE_AFTER]:
                    del self._entries[key]
        return snapshot
