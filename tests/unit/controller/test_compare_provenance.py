"""compare(): roofline figures, power share and provenance warnings from stored rows."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tunelab.analysis.compare import compare
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import AttemptRow, ExperimentRow

PROVENANCE: dict[str, Any] = {
    "argv": ["python3", "-m", "tunelab.bench.simulator", "--itl-ms", "10"],
    "system": {"driver_version": "580.159.04", "cuda_driver_version": "13.0"},
    "gpus": [{"name": "NVIDIA H200", "power_limit_watts": 700.0}],
    "engine": {"name": "tunelab-simulator", "version": "0.1.0"},
    "tunelab_version": "0.1.0",
    "benchmark": {"seed": 0, "dataset_sha256": "ab" * 32},
}


def pair(
    seq: int, name: str, varied: dict[str, str], tpot: float, provenance: dict[str, Any]
) -> tuple[ExperimentRow, list[AttemptRow]]:
    spec = {"benchmark": {"input_len": 0, "output_len": 2}, "roofline": {"weight_bytes": 15.36e9}}
    experiment = ExperimentRow(id=f"x-{seq}", group="g-1", name=name, varied=varied, seq=seq,
                               state=ExperimentState.SUCCEEDED, spec=spec)  # fmt: skip
    result = {"points": [{"concurrency": 1, "output_throughput": 10.0, "median_tpot_ms": tpot}]}
    summary = {"mean_power_watts_total": 250.0, "gpus": {"0": {"power_limit_watts": 600.0}}}
    attempt = AttemptRow(id=f"a-{seq}", experiment_id=experiment.id, number=1, host="h",
                         state=AttemptState.SUCCEEDED, result=result, gpu_summary=summary,
                         provenance=provenance)  # fmt: skip
    return experiment, [attempt]


def test_roofline_and_power_share_of_the_manual_session() -> None:
    doc = compare([pair(1, "s/baseline", {}, 97.0, PROVENANCE)])
    [row] = doc["experiments"]
    point = row["points"][0]
    # KV read of one token of context is nothing here: the floor is the weights' 3.2 ms
    assert point["tpot_floor_ms"] == pytest.approx(3.2, rel=1e-3)
    assert round(100 * point["roofline_efficiency"], 1) == 3.3
    assert row["power_share_of_limit"] == pytest.approx(250 / 600)
    assert row["provenance"]["system"]["driver_version"] == "580.159.04"


def test_a_driver_change_nobody_asked_for_is_a_warning() -> None:
    updated = copy.deepcopy(PROVENANCE)
    updated["system"]["driver_version"] = "575.57.08"
    updated["gpus"][0]["power_limit_watts"] = 450.0
    doc = compare([
        pair(2, "s/--itl-ms=5", {"server.flags.--itl-ms": "5"}, 5.0, updated),
        pair(1, "s/baseline", {}, 10.0, PROVENANCE),
    ])  # fmt: skip
    assert [r["name"] for r in doc["experiments"]] == ["s/baseline", "s/--itl-ms=5"]
    warnings = doc["warnings"]
    assert any(w.startswith("runs differ in driver") and "575.57.08 (s/--itl-ms=5)" in w
               for w in warnings), warnings  # fmt: skip
    assert any(w.startswith("runs differ in power limit") for w in warnings), warnings
    assert not any("engine" in w or "dataset" in w for w in warnings)  # those are equal


def test_no_warning_when_the_spec_varied_the_host() -> None:
    other = copy.deepcopy(PROVENANCE)
    other["gpus"][0]["name"] = "NVIDIA H100 80GB HBM3"
    doc = compare([
        pair(1, "s/host.name=a", {"host.name": "a"}, 10.0, PROVENANCE),
        pair(2, "s/host.name=b", {"host.name": "b"}, 10.0, other),
    ])  # fmt: skip
    assert doc["warnings"] == []


def test_unreadable_provenance_from_an_agent_is_kept_as_a_note() -> None:
    from tunelab.controller.dispatch import _provenance

    assert _provenance('{"tunelab_version": "0.1.0"}') == {"tunelab_version": "0.1.0"}
    for text in ("{not json", "[1, 2]", '"text"'):
        assert _provenance(text) == {"error": "the agent sent unreadable provenance"}


def test_runs_on_a_host_without_gpus_and_on_an_h200_are_a_warning() -> None:
    """Issue 24: compare said nothing when the same spec landed on both."""
    bare = copy.deepcopy(PROVENANCE)
    bare["gpus"] = []
    doc = compare([
        pair(1, "s/baseline#1", {}, 10.0, PROVENANCE),
        pair(2, "s/baseline#2", {}, 10.0, bare),
    ])  # fmt: skip
    assert any(
        w.startswith("runs differ in GPU model, which the spec did not vary:")
        and "NVIDIA H200 (s/baseline#1)" in w
        and "no GPU (s/baseline#2)" in w
        for w in doc["warnings"]
    ), doc["warnings"]


def test_a_run_recorded_with_a_10e400_byte_checkpoint_compares_and_summarises() -> None:
    """Issue 45.2: provenance stored by an older agent holds a header's 10**400 bytes; compare
    (the roofline) and the report's provenance summary raised OverflowError on it."""
    from tunelab.analysis.report.provenance import provenance_summary

    broken = {**PROVENANCE, "model": {"weight_bytes": 10**400, "kv_bytes_per_token": 1e308}}
    experiment, attempts = pair(1, "s/baseline", {}, 97.0, broken)
    experiment.spec = {"benchmark": {"input_len": 0, "output_len": 2}}  # no roofline: the model's
    doc = compare([(experiment, attempts)])
    assert "tpot_floor_ms" not in doc["experiments"][0]["points"][0]  # no floor from 10**400
    assert provenance_summary(broken)["weights"].startswith("out of range")
