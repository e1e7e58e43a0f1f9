"""Unit: a search spec's work is bounded by its size, and every seed accepted runs (issue 36.2,
36.4, 36.6: float grid points)."""

from __future__ import annotations

from typing import Any

import pytest

from tunelab.controller.search import space
from tunelab.controller.search.space import MAX_AXES, MAX_SEED, Param, ask_seed
from tunelab.controller.search.strategies import Tpe, TrialView
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.trials import with_field
from tunelab.controller.spec.errors import SpecError

BASE = """name: s
server: {command: [sim], flags: {--port: "{port}"}, port: auto, ready: {model: m}}
benchmark: {requests: 10, input_len: 8, output_len: 8}
search:
  objective: {maximize: output_throughput}
  load: {concurrency: [1]}
  budget: {trials: 10}
"""


def with_axes(count: int, values: str = "[1, 2]") -> str:
    axes = "".join(f"    server.flags.--f{i}: {values}\n" for i in range(count))
    return BASE + "  space:\n" + axes


def issues_of(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        search_from_text(text)
    return [(i.path, i.problem) for i in caught.value.issues]


def test_more_axes_than_the_cap_are_refused_naming_the_field_before_any_is_rendered() -> None:
    assert search_from_text(with_axes(MAX_AXES)) is not None
    assert issues_of(with_axes(500)) == [("search.space", f"has 500 axes; at most {MAX_AXES}")]


def test_a_list_axis_longer_than_the_cap_is_refused() -> None:
    values = "[" + ", ".join(str(v) for v in range(space.MAX_AXIS_VALUES + 1)) + "]"
    ((path, problem),) = issues_of(with_axes(1, values))
    assert path == "search.space.server.flags.--f0"
    assert (
        problem
        == f"lists {space.MAX_AXIS_VALUES + 1} values; at most {space.MAX_AXIS_VALUES} per axis"
    )


def test_validation_stops_at_its_cpu_budget_with_the_reason() -> None:
    with pytest.raises(SpecError) as caught:
        search_from_text(with_axes(8), cpu_budget=0.0)
    ((issue),) = caught.value.issues
    assert issue.path == "search.space" and "took over 0 CPU-s" in issue.problem


def test_each_axis_value_is_still_checked_on_its_own_with_the_defaults() -> None:
    text = with_axes(3).replace("--f2: [1, 2]", "--f2: [1, {a: 1}]")
    assert any(p == "server.flags.--f2" or "--f2" in p for p, _ in issues_of(text))
    found = search_from_text(with_axes(3))
    assert found is not None
    assert {k: v for k, v in found.first["server"]["flags"].items() if k != "--port"} == {
        "--f0": 1,
        "--f1": 1,
        "--f2": 1,
    }


def test_setting_a_field_copies_only_its_path() -> None:
    doc: dict[str, Any] = {"server": {"flags": {"--a": 1}}, "benchmark": {"requests": 1}}
    out = with_field(doc, "server.flags.--b", 2)
    assert out["server"]["flags"] == {"--a": 1, "--b": 2}
    assert doc["server"]["flags"] == {"--a": 1}  # the input is untouched
    assert out["benchmark"] is doc["benchmark"]  # and what is off the path is shared


@pytest.mark.parametrize("seed", [0, 4294, 4295, 12345, 20261205, MAX_SEED])
def test_every_seed_accepted_gives_per_ask_seeds_numpy_takes(seed: int) -> None:
    text = BASE.replace(
        "budget: {trials: 10}", f"budget: {{trials: 10}}\n  strategy: tpe\n  seed: {seed}"
    )
    found = search_from_text(text + "  space:\n    server.flags.--a: {int: [1, 64]}\n")
    assert found is not None
    history = [
        TrialView(n, {"server.flags.--a": 2 + n}, 0, "DONE", float(n)) for n in range(4)
    ]  # past the startup trials, so TPE's own sampler draws with the derived seed
    asked = Tpe().ask(found.spec, history, 2)
    assert len(asked.proposals) == 2
    assert all(0 <= ask_seed(seed, n) <= MAX_SEED for n in (0, 1, 10_000))
    assert ask_seed(7, 3) == 7 * 1_000_003 + 3  # small seeds keep the proposals they had


def test_a_seed_numpy_cannot_take_is_refused_at_validation() -> None:
    text = BASE + "  seed: 4294967296\n  space:\n    server.flags.--a: [1, 2]\n"
    assert ("search.seed", "must be <= 4294967295, got 4294967296") in issues_of(text)


def test_a_narrow_float_range_visits_each_grid_point_once() -> None:
    narrow = Param("server.flags.--x", "float", (), 0.9, 0.9000001)
    assert narrow.grid(4) == (0.9,)
    assert Param("server.flags.--x", "float", (), 0.8, 0.95).grid(4) == (0.8, 0.85, 0.9, 0.95)
