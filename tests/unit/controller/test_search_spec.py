"""``search:`` in a spec: every key read, every mistake named by its field before anything is
stored, and each value of the space checked as the agent will check it."""

from __future__ import annotations

import pytest

from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import Grid, finite_size
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.search.trials import trial_spec
from tunelab.controller.spec.errors import SpecError

BASE = """
name: s
server: {command: [sim], flags: {--port: "{port}"}, port: auto, ready: {model: m}}
benchmark: {requests: 10, input_len: 8, output_len: 8}
"""
FULL = """
search:
  space:
    server.flags.--max-num-seqs: [16, 32, 64]
    server.flags.--max-num-batched-tokens: {int: [512, 8192], log: true}
    server.flags.--gpu-memory-utilization: {float: [0.8, 0.95]}
    server.flags.--moe-runner-backend: [flashinfer_cutlass, triton]
  objective: {maximize: output_throughput}
  slo: {tpot_p99_ms: 50, ttft_p99_ms: 2000}
  load: {concurrency: find, max: 1024}
  budget: {trials: 40, duration: 6h}
  strategy: successive-halving
"""


def test_the_issue_example_is_read_whole() -> None:
    found = search_from_text(BASE + FULL)
    assert found is not None
    spec = found.spec
    assert [p.kind for p in spec.space] == ["choice", "int", "float", "choice"]
    assert spec.space[1].log and spec.space[1].grid(4) == (512, 1290, 3251, 8192)
    assert spec.objective == "output_throughput" and spec.maximize
    assert spec.slo == {"tpot_p99_ms": 50.0, "ttft_p99_ms": 2000.0}
    assert spec.load.find and spec.load.axis == "concurrency" and spec.load.maximum == 1024
    assert (spec.max_trials, spec.max_seconds, spec.strategy) == (40, 21600.0, "successive-halving")
    assert finite_size(spec) is None  # a float range: unbounded
    assert SearchSpec.from_dict(spec.to_dict()) == spec  # what the store keeps reads back
    # the first point is each list's first value and each range's low end
    assert found.first["server"]["flags"]["--max-num-batched-tokens"] == 512
    assert found.first["benchmark"]["find"] == {
        "axis": "concurrency",
        "max": 1024.0,
        "slo": {"p99_tpot_ms": 50.0, "p99_ttft_ms": 2000.0},
    }
    assert (
        "concurrency" not in found.first["benchmark"] or not found.first["benchmark"]["concurrency"]
    )


def test_a_plain_spec_is_no_search() -> None:
    assert search_from_text(BASE.replace("requests: 10", "requests: 10, concurrency: [1]")) is None


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        ("strategy: successive-halving", "search.strategy", "must be one of"),
        ("objective: {maximize: output_throughput}", "search.objective.maximize", "unknown metric"),
        ("load: {concurrency: find, max: 1024}", "search.load.max", "is required with find"),
        ("budget: {trials: 40, duration: 6h}", "search.budget.trials", "is required"),
        ("slo: {tpot_p99_ms: 50, ttft_p99_ms: 2000}", "search.slo.tpot_p50", "unknown key"),
        (
            "{int: [512, 8192], log: true}",
            "search.space.server.flags.--max-num-batched-tokens.int",
            "low must be below high",
        ),
    ],
)
def test_a_mistake_is_named_by_its_field(change: str, path: str, problem: str) -> None:
    bad = {
        "strategy: successive-halving": "strategy: hyperband",
        "objective: {maximize: output_throughput}": "objective: {maximize: speed}",
        "load: {concurrency: find, max: 1024}": "load: {concurrency: find}",
        "budget: {trials: 40, duration: 6h}": "budget: {duration: 6h}",
        "slo: {tpot_p99_ms: 50, ttft_p99_ms: 2000}": "slo: {tpot_p50: 50}",
        "{int: [512, 8192], log: true}": "{int: [8192, 512]}",
    }[change]
    with pytest.raises(SpecError) as caught:
        search_from_text(BASE + FULL.replace(change, bad))
    assert any(i.path == path and problem in i.problem for i in caught.value.issues), caught.value


def test_a_value_the_agent_would_refuse_is_refused_at_submit() -> None:
    text = BASE + FULL.replace("[16, 32, 64]", "[16, {a: 1}]")
    with pytest.raises(SpecError) as caught:
        search_from_text(text)
    assert "server.flags.--max-num-seqs" in str(caught.value)


def test_a_search_file_holds_one_document_and_no_matrix() -> None:
    with pytest.raises(SpecError, match="only document"):
        search_from_text(BASE + FULL + "---\n" + BASE)
    with pytest.raises(SpecError, match="not both"):
        search_from_text(BASE + FULL + "matrix: {server.flags.--x: [1, 2]}\n")


def test_successive_halving_rungs_lengthen_the_benchmark() -> None:
    found = search_from_text(BASE + FULL)
    assert found is not None
    params = found.spec.default_params
    rung2, issues = trial_spec(found.base, found.spec, params, 2)
    assert not issues and rung2["benchmark"]["requests"] == 10 * 3**2


def test_a_fixed_load_list_becomes_the_sweep() -> None:
    text = BASE + FULL.replace("{concurrency: find, max: 1024}", "{concurrency: [1, 8, 64]}")
    found = search_from_text(text)
    assert found is not None and found.first["benchmark"]["concurrency"] == [1, 8, 64]
    assert "find" not in found.first["benchmark"]


def test_the_grid_visits_every_point_once_in_order() -> None:
    text = BASE + FULL.replace("strategy: successive-halving", "strategy: grid\n  grid_points: 2")
    found = search_from_text(text)
    assert found is not None
    proposals = Grid().ask(found.spec, [], 1000).proposals
    assert len(proposals) == 3 * 2 * 2 * 2
    assert proposals[0].params == found.spec.default_params


def test_a_launch_at_a_found_load_measures_as_many_requests_as_a_find_point() -> None:
    """A race or drift launch fixes the load a search found; a spec that set neither requests
    nor a duration (the find points' own default applied) must still pass the agent's check,
    which a fixed load requires (a real search queued 1,649 refused race launches)."""
    found = search_from_text(BASE.replace("requests: 10, ", "") + FULL)
    assert found is not None
    params = found.spec.default_params
    doc, issues = trial_spec(found.base, found.spec, params, 0, {"concurrency": 14})
    assert not issues, issues
    assert doc["benchmark"]["concurrency"] == [14] and doc["benchmark"]["requests"] == 70
    rated, issues = trial_spec(found.base, found.spec, params, 0, {"rate": 0.2})
    assert not issues and rated["benchmark"]["requests"] == 10


def test_a_plateau_travels_from_the_search_to_the_agents_find_and_reads_back() -> None:
    found = search_from_text(BASE + FULL.replace("max: 1024}", 'max: 1024, plateau: "5%"}'))
    assert found is not None and found.spec.load.plateau == 0.05
    assert SearchSpec.from_dict(found.spec.to_dict()) == found.spec
    assert found.first["benchmark"]["find"]["plateau"] == 0.05
    legacy = SearchSpec.from_dict(search_from_text(BASE + FULL).spec.to_dict())  # type: ignore[union-attr]
    assert legacy.load.plateau == 0.0 and "plateau" not in legacy.load.to_dict()


@pytest.mark.parametrize(
    ("load", "problem"),
    [
        ('{concurrency: find, max: 64, plateau: "150%"}', "must be above 0% and below 100%"),
        ("{concurrency: find, max: 64, plateau: 0}", "must be above 0"),
        ('{concurrency: find, max: 64, plateau: "x%"}', "a percentage such as 5%"),
        ("{concurrency: [1, 2], plateau: 0.05}", "goes with find only"),
    ],
)
def test_a_bad_plateau_is_named(load: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        search_from_text(BASE + FULL.replace("{concurrency: find, max: 1024}", load))
    assert any(
        i.path == "search.load.plateau" and problem in i.problem for i in caught.value.issues
    ), caught.value


@pytest.mark.parametrize(
    ("confirm", "launches", "seconds"),
    [("6", 6, 0.0), ("2h", 100, 7200.0), ("30m", 100, 1800.0), ("{gpu_time: 1h}", 100, 3600.0)],
)
def test_the_race_budget_may_be_a_gpu_time(confirm: str, launches: int, seconds: float) -> None:
    text = BASE + FULL.replace("duration: 6h}", f"duration: 6h, confirm: {confirm}}}")
    found = search_from_text(text)
    assert found is not None
    assert (found.spec.confirm_launches, found.spec.confirm_seconds) == (launches, seconds)


@pytest.mark.parametrize(("confirm", "problem"), [("0s", "above 0"), ("lots", "a duration")])
def test_a_bad_gpu_time_is_named(confirm: str, problem: str) -> None:
    text = BASE + FULL.replace("duration: 6h}", f"duration: 6h, confirm: {confirm}}}")
    with pytest.raises(SpecError) as caught:
        search_from_text(text)
    found = [i for i in caught.value.issues if i.path == "search.budget.confirm"]
    assert len(found) == 1 and problem in found[0].problem, caught.value


def test_the_noise_may_be_declared() -> None:
    found = search_from_text(BASE + FULL + "  noise: {launch: 1%, within: 0.05}\n")
    assert found is not None and found.spec.noise == (0.01, 0.05)
    assert SearchSpec.from_dict(found.spec.to_dict()) == found.spec


@pytest.mark.parametrize(
    ("noise", "path"),
    [("{launch: 1%}", "search.noise"), ("{launch: 1%, within: 0}", "search.noise.within")],
)
def test_a_bad_noise_is_named(noise: str, path: str) -> None:
    with pytest.raises(SpecError) as caught:
        search_from_text(BASE + FULL + f"  noise: {noise}\n")
    assert any(i.path == path for i in caught.value.issues), caught.value
