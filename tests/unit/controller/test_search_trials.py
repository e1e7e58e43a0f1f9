"""What a finished trial teaches the search: the failure reason comes from the attempt's
``failure_reason`` column (the store's record since migration 5), not from the result JSON."""

from __future__ import annotations

from typing import Any

from tunelab.controller.search.space import Load, Param, SearchSpec
from tunelab.controller.search.trials import outcome
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store.models import AttemptRow, ExperimentRow

SPEC = SearchSpec(
    space=(Param("server.flags.--max-num-seqs", "choice", (16, 32)),),
    objective="output_throughput",
    maximize=True,
    slo={"tpot_p99_ms": 50.0},
    load=Load("concurrency", False, 0.0, (4.0,)),
    strategy="grid",
    max_trials=2,
)


def failed(state: AttemptState, reason: str, result: dict[str, Any] | None) -> Any:
    exp = ExperimentRow("x-1", "g-1", "s/t1", ExperimentState.FAILED, {}, message="failed")
    attempt = AttemptRow(
        "a-1", "x-1", 1, "h1", state, created_at=1.0, finished_at=3.0,
        result=result, failure_reason=reason, message="server exited",
    )  # fmt: skip
    return outcome(SPEC, exp, [attempt])


def test_the_reason_is_read_from_the_attempt_column() -> None:
    found = failed(AttemptState.FAILED_STARTUP, "CUDA_OOM", {"points": []})
    assert (found.state, found.failure_reason) == ("FAILED", "CUDA_OOM")
    assert found.details["message"] == "server exited"
    assert found.details["gpu_seconds"] == 2.0


def test_the_column_wins_over_a_stale_result_reason() -> None:
    found = failed(AttemptState.FAILED_STARTUP, "CUDA_OOM", {"failure_reason": "UNKNOWN"})
    assert found.failure_reason == "CUDA_OOM"


def test_without_a_reason_the_attempt_state_names_the_failure() -> None:
    assert failed(AttemptState.TIMED_OUT, "", None).failure_reason == "TIMED_OUT"
    assert failed(AttemptState.FAILED_BENCHMARK, "", {}).failure_reason == "FAILED_BENCHMARK"


def test_a_trial_keeps_the_servers_prompt_tokens_and_search_show_prints_them() -> None:
    """Issue 35 item 6: the server's own mean prompt tokens, and "approximate" without a
    tokenizer, from the trial's result to the ``search show`` table."""
    from tunelab.cli.search_cmd import _prompt_tokens

    exp = ExperimentRow("x-1", "g-1", "s/t1", ExperimentState.SUCCEEDED, {})
    point = {"concurrency": 4, "output_throughput": 90.0, "p99_tpot_ms": 20.0, "completed": 8,
             "mean_input_tokens": 127.5}  # fmt: skip
    result = {"points": [point], "dataset": {"name": "random", "lengths_exact": False}}
    attempt = AttemptRow("a-1", "x-1", 1, "h1", AttemptState.SUCCEEDED, result=result)
    found = outcome(SPEC, exp, [attempt])
    assert found.details["mean_input_tokens"] == 127.5
    assert found.details["lengths_exact"] is False
    trials = [found.details, {"mean_input_tokens": 128.5, "lengths_exact": False}]
    assert _prompt_tokens(trials) == (
        "prompt tokens (server's count): mean 128.0 per request; lengths approximate: no tokenizer"
    )
    assert _prompt_tokens([{"mean_input_tokens": None, "lengths_exact": None}]) is None
