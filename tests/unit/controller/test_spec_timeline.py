"""Unit: ``benchmark.timeline`` in a spec, to the RunSpec and on to the agent's bench config."""

from __future__ import annotations

import pytest

from tests.unit.controller.test_spec_profile import BASE as PROFILE_BASE
from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.spec.render import to_run_spec
from tunelab.v1 import run_pb2

# the profile tests' spec, with room for more benchmark keys
BASE = PROFILE_BASE.replace("output_len: 32}", "output_len: 32%s}")


def builtin_of(extra: str) -> run_pb2.BuiltinBenchmark:
    return to_run_spec(expand_text(BASE % extra)[0].spec, "x-1-a1", gpus=[]).benchmark.builtin


def step_on_agent(builtin: run_pb2.BuiltinBenchmark) -> float:
    return BenchConfig.from_builtin_pb(builtin, "http://127.0.0.1:1").timeline_step_s


def test_unset_is_the_default_one_second_and_the_message_is_as_before() -> None:
    builtin = builtin_of("")
    assert builtin.timeline_step_seconds == 0 and not builtin.HasField("timeline")
    assert "timeline_step" not in expand_text(BASE % "")[0].spec["benchmark"]
    assert step_on_agent(builtin) == 1.0


def test_a_step_and_the_off_switch() -> None:
    assert step_on_agent(builtin_of(", timeline: {step: 250ms}")) == 0.25
    off = builtin_of(", timeline: false")
    assert off.HasField("timeline") and not off.timeline
    assert step_on_agent(off) == 0.0


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (", timeline: {step: 10ms}", "benchmark.timeline.step"),
        (", timeline: {step: 2m}", "benchmark.timeline.step"),
        (", timeline: {step: soon}", "benchmark.timeline.step"),
        (", timeline: {every: 1s}", "benchmark.timeline"),
        (", timeline: 3", "benchmark.timeline"),
    ],
)
def test_a_bad_timeline_is_refused_naming_the_field(extra: str, field: str) -> None:
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        expand_text(BASE % extra)


def test_the_agent_checks_the_step_again() -> None:
    builtin = builtin_of("")
    builtin.timeline_step_seconds = 0.01
    with pytest.raises(BenchConfigError, match="timeline_step_s"):
        step_on_agent(builtin)
