"""Unit: watch streams share their reads — one store read per experiment per interval."""

from __future__ import annotations

from tunelab.controller.watchcache import WatchCache
from tunelab.v1 import controller_pb2


def test_many_watchers_of_one_experiment_cost_one_read_per_interval() -> None:
    reads: list[str] = []
    clock = [0.0]

    def read(experiment_id: str) -> tuple[controller_pb2.Experiment, bool] | None:
        reads.append(experiment_id)
        if experiment_id == "gone":
            return None
        return controller_pb2.Experiment(id=experiment_id, message=f"read {len(reads)}"), False

    cache = WatchCache(read, max_age=0.25, clock=lambda: clock[0])
    first = [cache.get("x1") for _ in range(200)]  # 200 streams polling at once
    assert reads == ["x1"] and len({s.encoded for s in first if s}) == 1
    clock[0] += 0.3
    later = cache.get("x1")
    assert reads == ["x1", "x1"] and later is not None and later.message.message == "read 2"
    assert cache.get("gone") is None
