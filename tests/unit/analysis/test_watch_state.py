"""A watch metric's state (``tunelab.analysis.watch.state.step``): what alerts follow."""

from __future__ import annotations

from tunelab.analysis.watch.state import MetricState, Observation, step


def run(*observations: Observation) -> list[str]:
    state = MetricState()
    seen = []
    for obs in observations:
        state = step(state, obs)
        seen.append(state.state)
    return seen


def test_an_undecided_occurrence_never_clears_a_regression() -> None:
    """Issue 43: one undecided occurrence after three regressions cleared the alert."""
    verdicts = ["baseline", "regression", "regression", "regression", "undecided", "undecided"]
    states = run(*(Observation(i + 1, v, 1) for i, v in enumerate(verdicts)))
    assert states == ["baseline", "regression", "regression", "regression", "regression",
                      "regression"]  # fmt: skip


def test_no_change_or_an_improvement_clears_it() -> None:
    obs = [Observation(2, "regression", 1), Observation(3, "undecided", 1),
           Observation(4, "no change", 1)]  # fmt: skip
    assert run(*obs) == ["regression", "regression", "no change"]
    assert run(Observation(2, "regression", 1), Observation(3, "improvement", 1))[-1] == (
        "improvement"
    )


def test_since_is_the_occurrence_that_entered_the_state() -> None:
    state = MetricState()
    for obs in (Observation(2, "no change", 1), Observation(3, "regression", 1),
                Observation(4, "regression", 1), Observation(5, "undecided", 1)):  # fmt: skip
        state = step(state, obs)
    assert (state.state, state.since, state.cause) == ("regression", 3, "verdict")


def test_a_worse_change_point_is_a_regression_even_when_each_verdict_is_no_change() -> None:
    """A slow drift under ``baseline: previous``: every occurrence is "no change" against the
    one before; the change point over the history says the level stepped down."""
    obs = [Observation(n, "no change", n - 1) for n in range(2, 9)]
    obs.append(Observation(9, "no change", 8, point=6, shift="worse"))
    obs += [Observation(10, "no change", 9, point=6, shift="worse")]
    states = run(*obs)
    assert states[-3:] == ["no change", "regression", "regression"]


def test_a_change_point_regression_holds_against_a_baseline_past_the_step() -> None:
    state = step(MetricState(), Observation(9, "no change", 8, point=6, shift="worse"))
    assert (state.state, state.step_at, state.cause) == ("regression", 6, "change point before #6")
    # previous: the baseline (#9) is already past the step: its "no change" is no return
    assert step(state, Observation(10, "no change", 9, point=6, shift="worse")).state == (
        "regression"
    )
    # first: a baseline from before the step (#1) that shows no change again clears it
    assert step(state, Observation(10, "no change", 1, point=6, shift="worse")).state == (
        "no change"
    )


def test_a_better_change_point_after_the_step_ends_the_regression() -> None:
    state = step(MetricState(), Observation(9, "undecided", 8, point=6, shift="worse"))
    state = step(state, Observation(15, "undecided", 14, point=12, shift="better"))
    assert (state.state, state.since) == ("improvement", 15)


def test_a_change_point_already_acted_on_does_not_fire_again() -> None:
    state = step(MetricState(), Observation(9, "undecided", 1, point=6, shift="worse"))
    state = step(state, Observation(10, "no change", 1, point=6, shift="worse"))
    assert state.state == "no change"
    state = step(state, Observation(11, "no change", 1, point=6, shift="worse"))
    assert state.state == "no change"  # the same point, seen before: not a new regression


def test_the_state_round_trips_through_its_document() -> None:
    state = MetricState("regression", 5, "change point before #5", 5, 5)
    assert MetricState.from_dict(state.to_dict()) == state
    assert MetricState.from_dict({"state": "bogus"}) == MetricState()
    assert MetricState.from_dict(None) == MetricState()
