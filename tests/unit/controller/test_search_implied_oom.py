"""The implied-OOM skip: an OOM implies OOM only along axes where a larger value needs more
memory. By default that is every integer axis but the parallelism/offload ones (a larger
tensor-parallel size spreads the model thinner); ``search.implied_oom`` names the axes exactly."""

from __future__ import annotations

from typing import Any

import pytest

from tunelab.controller.search.driver import implied_oom
from tunelab.controller.search.space import Param, SearchSpec, default_oom_axis
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.spec.errors import SpecError
from tunelab.controller.states import TrialState
from tunelab.controller.store.search_models import TrialRow

BASE = """
name: s
server: {command: [sim], flags: {--port: "{port}"}, port: auto, ready: {model: m}}
benchmark: {requests: 10, input_len: 8, output_len: 8}
search:
  space:
    server.flags.--tensor-parallel-size: [1, 2, 4]
    server.flags.--max-num-seqs: [16, 32, 64]
    server.flags.--moe-runner-backend: [triton, cutlass]
  objective: {maximize: output_throughput}
  slo: {tpot_p99_ms: 50}
  load: {concurrency: [4]}
  budget: {trials: 10}
"""
TP, SEQS, BACKEND = (
    "server.flags.--tensor-parallel-size",
    "server.flags.--max-num-seqs",
    "server.flags.--moe-runner-backend",
)


def spec_of(extra: str = "") -> SearchSpec:
    found = search_from_text(BASE + extra)
    assert found is not None
    return SearchSpec.from_dict(found.spec.to_dict())  # as the driver reads it from the store


def oom(tp: int, seqs: int) -> TrialRow:
    params = {TP: tp, SEQS: seqs, BACKEND: "triton"}
    return TrialRow("g-1", 1, params, TrialState.FAILED, 1.0, failure_reason="CUDA_OOM")


def point(tp: int, seqs: int, backend: str = "triton") -> dict[str, Any]:
    return {TP: tp, SEQS: seqs, BACKEND: backend}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("server.flags.--max-num-seqs", True),
        ("server.flags.--max-num-batched-tokens", True),
        ("server.flags.--tensor-parallel-size", False),
        ("server.flags.--pipeline-parallel-size", False),
        ("server.flags.--data-parallel-size", False),
        ("server.flags.--tp-size", False),
        ("server.flags.--moe-ep-size", False),
        ("server.flags.--cpu-offload-gb", False),
        ("server.flags.--swap-space", False),
        ("server.flags.--num-gpus", False),
    ],
)
def test_the_default_rule_excludes_parallelism_and_offload(path: str, expected: bool) -> None:
    assert default_oom_axis(Param(path, "choice", (1, 2, 4))) is expected
    assert default_oom_axis(Param(path, "int", (), 1.0, 8.0)) is expected


def test_the_default_rule_ignores_axes_that_are_not_integers() -> None:
    assert not default_oom_axis(Param("server.flags.--max-num-seqs", "choice", ("a", "b")))
    assert not default_oom_axis(Param("server.flags.--gpu-mem", "float", (), 0.8, 0.9))


def test_by_default_a_larger_tensor_parallel_size_is_not_skipped() -> None:
    spec = spec_of()
    assert spec.implied_oom is None and spec.oom_axes == (SEQS,)
    assert implied_oom(spec, point(2, 16), [oom(1, 16)]) is None
    assert implied_oom(spec, point(4, 16), [oom(1, 16)]) is None


def test_by_default_a_larger_max_num_seqs_is_skipped_the_others_equal() -> None:
    spec = spec_of()
    cause = oom(1, 32)
    assert implied_oom(spec, point(1, 64), [cause]) is cause
    assert implied_oom(spec, point(1, 16), [cause]) is None, "a smaller value still runs"
    assert implied_oom(spec, point(2, 64), [cause]) is None, "another TP: not implied"
    assert implied_oom(spec, point(1, 64, "cutlass"), [cause]) is None, "another backend"


def test_an_explicit_list_names_exactly_the_oom_axes() -> None:
    spec = spec_of(f"  implied_oom: [{TP}]\n")
    assert spec.implied_oom == (TP,) and spec.oom_axes == (TP,)
    cause = oom(1, 32)
    assert implied_oom(spec, point(2, 32), [cause]) is cause
    assert implied_oom(spec, point(1, 64), [cause]) is None, "--max-num-seqs not listed"


def test_an_empty_list_turns_the_skip_off() -> None:
    spec = spec_of("  implied_oom: []\n")
    assert spec.implied_oom == () and spec.oom_axes == ()
    assert implied_oom(spec, point(1, 64), [oom(1, 16)]) is None


@pytest.mark.parametrize(
    ("value", "field", "problem"),
    [
        ("[server.flags.--nope]", "search.implied_oom[0]", "is not a path of search.space"),
        (f"[{SEQS}, {BACKEND}]", "search.implied_oom[1]", "is not an integer axis"),
        (f"[{SEQS}, {SEQS}]", "search.implied_oom[1]", "twice"),
        (SEQS, "search.implied_oom", "must be a list"),
    ],
)
def test_a_bad_implied_oom_is_refused_naming_the_field(
    value: str, field: str, problem: str
) -> None:
    with pytest.raises(SpecError) as caught:
        search_from_text(BASE + f"  implied_oom: {value}\n")
    found = [(i.path, i.problem) for i in caught.value.issues]
    assert any(path == field and problem in text for path, text in found), found
