"""``tunelab show`` and ``compare`` print the server's own mean prompt tokens, and say when the
lengths asked for were approximate (no tokenizer) (issue 35 item 6)."""

from __future__ import annotations

from typing import Any

from tunelab.analysis.compare import compare
from tunelab.cli.compare_view import prompt_token_lines, render_compare_table
from tunelab.cli.show_view import render_show
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import AttemptRow, ExperimentRow


def result(mean_tokens: float | None, exact: bool) -> dict[str, Any]:
    point = {"concurrency": 1, "output_throughput": 10.0, "median_tpot_ms": 5.0, "completed": 4,
             "failed": 0, "mean_input_tokens": mean_tokens}  # fmt: skip
    dataset = {"name": "random", "lengths_exact": exact}
    return {"points": [point], "dataset": dataset}


def pair(seq: int, doc: dict[str, Any]) -> tuple[ExperimentRow, list[AttemptRow]]:
    spec = {"benchmark": {"input_len": 32, "output_len": 2}}
    experiment = ExperimentRow(id=f"x-{seq}", group="g-1", name=f"s/e{seq}", varied={}, seq=seq,
                               state=ExperimentState.SUCCEEDED, spec=spec)  # fmt: skip
    attempt = AttemptRow(id=f"a-{seq}", experiment_id=experiment.id, number=1, host="h",
                         state=AttemptState.SUCCEEDED, result=doc)  # fmt: skip
    return experiment, [attempt]


def test_compare_carries_and_prints_the_servers_count() -> None:
    doc = compare([pair(1, result(127.0, False)), pair(2, result(127.0, False))])
    row = doc["experiments"][0]
    assert row["lengths_exact"] is False and row["points"][0]["mean_input_tokens"] == 127.0
    line = (
        "prompt tokens (server's count): mean 127.0 per request; lengths approximate: no tokenizer"
    )
    assert prompt_token_lines(doc) == [line]  # said once when every run agrees
    assert line in render_compare_table(doc)


def test_compare_says_each_runs_count_when_they_differ() -> None:
    doc = compare([pair(1, result(32.0, True)), pair(2, result(None, True))])
    assert prompt_token_lines(doc) == [
        "s/e1: prompt tokens (server's count): mean 32.0 per request"
    ]


def test_show_prints_the_line_under_the_points() -> None:
    attempt = {
        "number": 1, "id": "a-1", "gpus": [], "host": "h", "state": "SUCCEEDED", "message": "",
        "result": result(122.5, False), "gpu_summary": None, "provenance": None,
    }  # fmt: skip
    data: dict[str, Any] = {
            "id": "x-1", "name": "s/e1", "state": "SUCCEEDED", "group": "g-1", "varied": {},
            "host_selector": "any", "spec": None, "message": "", "attempts": [attempt]}  # fmt: skip
    text = render_show(data, lambda doc: [])
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("c=1:"))
    assert lines[at + 1] == (
        "    prompt tokens (server's count): mean 122.5 per request; lengths approximate: no "
        "tokenizer"
    )
