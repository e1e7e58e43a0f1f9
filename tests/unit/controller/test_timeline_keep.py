"""The controller takes an attempt's timeline out of its result and stores it with its events;
an external tool's own ``timeline`` key is left alone; a broken timeline is dropped, said in the
result's warnings, and never fails anything."""

from __future__ import annotations

from tests.unit.controller.test_timeline_events import between, timeline
from tunelab.controller.store.sqlite import SqliteStore
from tunelab.controller.timelines import keep_timeline


def test_the_timeline_goes_to_its_table_with_its_events() -> None:
    store = SqliteStore(":memory:")
    doc = timeline({"engine.preemptions": between(12, 20, 5.0, 0.0)})
    rest = keep_timeline(store, "a-1", {"points": [], "timeline": doc}, 1.8e9)
    assert rest is not None and "timeline" not in rest and rest["timeline_bytes"] > 1000
    assert store.timeline("a-1") == doc
    assert [e["kind"] for e in store.timeline_events(["a-1"])["a-1"]] == ["kv_cache_full"]


def test_a_foreign_or_broken_timeline() -> None:
    store = SqliteStore(":memory:")
    foreign = {"timeline": [1, 2, 3], "throughput": 5}
    assert keep_timeline(store, "a-1", foreign, 1.8e9) == foreign
    broken = {"timeline": {**timeline(), "windows": 7}, "warnings": ["w"]}
    rest = keep_timeline(store, "a-2", broken, 1.8e9)
    assert rest is not None and "timeline" not in rest
    assert rest["warnings"][0] == "w" and rest["warnings"][1].startswith("timeline not kept: ")
    assert store.timeline("a-2") is None and store.timeline_events(["a-1", "a-2"]) == {}
    assert keep_timeline(store, "a-3", None, 1.8e9) is None
