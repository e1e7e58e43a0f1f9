"""The noise profile through the driver: launches measured in blocks (their stored timelines)
give the race's variance components, shown in ``noise`` and pooled into the profile of the
host class x engine x model as each search ends (a real SQLite store)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tests.unit.controller.test_search_cost import timeline_doc
from tests.unit.controller.test_search_driver import BASE, with_hosts
from tunelab.analysis.noise import ProfileKey
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.summary import search_document
from tunelab.controller.states import AttemptState, ExperimentState, SearchState
from tunelab.controller.store import SqliteStore
from tunelab.controller.store.search_models import SearchRow

SEARCH = """
search:
  space:
    server.flags.--max-num-seqs: [16, 32]
  objective: {maximize: output_throughput}
  load: {concurrency: [8]}
  budget: {trials: 2, confirm: 3}
"""
LEVEL = {16: 1000.0, 32: 1030.0}  # 3 % apart: the race needs its launches


def timeline(tokens_per_s: list[float]) -> dict[str, Any]:
    """One point, measured from 0 s, 10 one-second windows per block."""
    return timeline_doc([v for v in tokens_per_s for _ in range(10)])


def run_queued(store: SqliteStore, rng: random.Random) -> None:
    """Each launch at its own level (2 % launch noise), its 3 blocks 0.5 % around it."""
    for exp in store.list_experiments([ExperimentState.QUEUED], limit=1000):
        attempt = store.create_attempt(exp.id, "h1", [0], 1.0)
        store.update_attempt(attempt.id, provenance={"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]})
        seqs = int(exp.spec["server"]["flags"]["--max-num-seqs"])
        level = LEVEL[seqs] * (1 + rng.gauss(0, 0.02))
        blocks = [level * (1 + rng.gauss(0, 0.005)) for _ in range(3)]
        point = {"concurrency": 8, "point_index": 0, "output_throughput": sum(blocks) / 3}
        store.put_timeline(attempt.id, timeline(blocks), [], 1.0)
        store.finish_attempt(
            attempt.id,
            AttemptState.SUCCEEDED,
            [AttemptState.DISPATCHING],
            result={"points": [point]},
        )


def search(store: SqliteStore, group: str, seed: int) -> dict[str, Any]:
    found = search_from_text(BASE + SEARCH)
    assert found is not None
    row = SearchRow(group, found.name, SearchState.RUNNING, found.spec.to_dict(), found.base, 0.0)
    store.insert_search(row)
    driver, rng = SearchDriver(store, lambda: 1.0), random.Random(seed)
    for _ in range(60):
        driver.tick()
        found_row = store.get_search(group)
        assert found_row is not None
        if found_row.state != "RUNNING":
            return search_document(found_row, store.search_trials(group))
        run_queued(store, rng)
    raise AssertionError("the search did not end")


def test_a_search_in_blocks_shows_its_noise_and_remembers_it(tmp_path: Path) -> None:
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    doc = search(store, "g-1", 1)
    noise = doc["noise"]
    assert noise["blocks"] == 3 * noise["launches"] and noise["launches"] >= 4
    assert 0.001 < noise["within_cv"] < 0.02  # the blocks' 0.5 %
    classes = {t.details.get("host_class") for t in store.search_trials("g-1") if t.experiment_id}
    assert len(classes) == 1
    key = ProfileKey(str(classes.pop()), "sim", "m")  # the engine: the command; the model
    first = store.noise_profile(key)
    assert first is not None and first.searches == 1
    search(store, "g-2", 2)  # a second search on the same host class, engine and model
    second = store.noise_profile(key)
    assert second is not None and second.searches == 2
    assert second.df_between > first.df_between
