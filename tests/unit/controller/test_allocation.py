"""The allocation: the nested-design optimum, extend against launch, interleaving, and what an
undecided race would need."""

from __future__ import annotations

import math

from tunelab.analysis import allocation
from tunelab.analysis.allocation import Costs, Side, Step
from tunelab.analysis.variance import Components, Prior, cv_to_var


def _components(between_cv: float, within_cv: float, prior: bool = True) -> Components:
    b, w = cv_to_var(between_cv), cv_to_var(within_cv)
    return Components(b, w, 2, 40, 4, 44, prior=Prior(b, w, 20.0) if prior else None)


def test_the_optimum_is_the_square_root_rule() -> None:
    # sqrt(600 / 10 x 0.01 / 0.0009) = sqrt(666.7) = 25.8 -> 26 blocks a launch
    c = Components(0.0009, 0.01, 2, 40, 4, 44)
    assert allocation.optimal_blocks(c, Costs(600.0, 10.0)) == 26
    # cheap launches and large launch noise: the shortest launch
    assert allocation.optimal_blocks(c, Costs(5.0, 10.0)) == allocation.MIN_BLOCKS
    assert allocation.optimal_blocks(c, Costs(1e9, 1.0)) == allocation.MAX_BLOCKS


def test_negligible_launch_noise_and_expensive_launches_extend() -> None:
    c = _components(0.003, 0.05)
    sides = [Side("a", (3,), True), Side("b", (3,), True)]
    steps = allocation.plan_round(c, sides, "a", Costs(600.0, 10.0))
    assert steps == [Step("a", True, allocation.CHUNK), Step("b", True, allocation.CHUNK)]
    # a 10 % gap is decided without a single launch more
    found = allocation.needed(c, sides[0], sides[1], math.log1p(0.05), Costs(600.0, 10.0))
    assert found is not None and found[1] == 0


def test_large_launch_noise_launches_again() -> None:
    c = _components(0.10, 0.02)
    sides = [Side("a", (3,), True), Side("b", (3,), True)]
    steps = allocation.plan_round(c, sides, "a", Costs(5.0, 10.0))
    assert all(not s.extend for s in steps)
    found = allocation.needed(c, sides[0], sides[1], math.log1p(0.05), Costs(5.0, 10.0))
    assert found is not None and found[1] > 10  # launches, not blocks, shrink it


def test_without_launch_evidence_a_second_launch_comes_first() -> None:
    # one launch each, no prior: no launch degree of freedom, so nothing can be judged by blocks
    c = Components(0.0, cv_to_var(0.05), 0, 20, 2, 22)
    sides = [Side("a", (11,), True), Side("b", (11,), True)]
    steps = allocation.plan_round(c, sides, "a", Costs(600.0, 10.0))
    assert all(not s.extend for s in steps)


def test_new_launches_alternate_their_order() -> None:
    steps = [Step("a", False, 3), Step("b", False, 3), Step("c", True, 3)]
    assert [s.config for s in allocation.interleave(steps, 0)] == ["c", "a", "b"]
    assert [s.config for s in allocation.interleave(steps, 1)] == ["c", "b", "a"]


def test_a_gap_out_of_reach_says_so() -> None:
    c = _components(0.10, 0.10, prior=False)
    a, b = Side("a", (3, 3), False), Side("b", (3, 3), False)
    assert allocation.needed(c, a, b, math.log1p(0.0001), Costs(600.0, 10.0)) is None
