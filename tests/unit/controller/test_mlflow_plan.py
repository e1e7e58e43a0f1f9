"""What an MLflow export writes (``tunelab.analysis.mlflow.plan``), without MLflow: a plan per
group and attempt."""

from __future__ import annotations

from typing import Any

from tunelab.analysis.mlflow.plan import argv_params, metric_key, plans_for, variant_label


def document() -> dict[str, Any]:
    row = {
        "id": "x-1", "name": "abl/--itl-ms=5#1", "group": "g-1", "state": "FAILED",
        "varied": {"server.flags.--itl-ms": "5"},
    }  # fmt: skip
    return {
        "design": "ablation",
        "varied_fields": ["server.flags.--itl-ms"],
        "experiments": [row],
        "effects": [
            {"change": "--itl-ms=5", "metric": "output_throughput", "point": "c1",
             "ratio": 1.6, "ci95": [0.5, 0.7], "verdict": "better"},
        ],
    }  # fmt: skip


def attempts() -> dict[str, list[dict[str, Any]]]:
    ok = {
        "id": "x-1-a1", "number": 1, "host": "h", "state": "SUCCEEDED", "message": "",
        "created_at": 100.0, "finished_at": 110.0, "failure_reason": None,
        "result": {"points": [{"concurrency": 1, "output_throughput": 80.0, "p99_tpot_ms": 9.5},
                              {"concurrency": 4, "output_throughput": 300.0}]},
        "gpu_summary": {"tokens_per_joule": 0.2, "mean_power_watts_total": 250.0},
        "provenance": {"argv": ["python", "-m", "sim", "--itl-ms", "5", "--api-key=<redacted>",
                                "--usage"], "engine": {"name": "sim", "version": "1"}},
    }  # fmt: skip
    failed = {
        "id": "x-1-a2", "number": 2, "host": "h", "state": "FAILED_STARTUP",
        "message": "CUDA out of memory", "created_at": 120.0, "finished_at": 121.0,
        "failure_reason": "OOM", "result": None, "gpu_summary": None, "provenance": None,
    }  # fmt: skip
    running = {**failed, "id": "x-1-a3", "number": 3, "state": "STARTING", "finished_at": None}
    return {"x-1": [ok, failed, running]}


def test_a_parent_per_group_and_a_run_per_finished_attempt() -> None:
    plans = plans_for(document(), attempts())
    assert [p.key for p in plans] == ["group:g-1", "attempt:x-1-a1", "attempt:x-1-a2"]
    parent, ok, failed = plans
    assert ok.parent_key == failed.parent_key == "group:g-1" and parent.parent_key is None
    assert ("output_throughput", 80.0, 0) in ok.metrics
    assert ("output_throughput", 300.0, 1) in ok.metrics and ("concurrency", 4.0, 1) in ok.metrics
    assert ("tpot_p99_ms", 9.5, 0) in ok.metrics and ("gpu_power_watts", 250.0, 0) in ok.metrics
    assert ok.status == "FINISHED" and ok.start_ms == 100_000 and ok.end_ms == 110_000
    assert ok.tags["verdict.output_throughput.c1"] == "better"
    assert failed.status == "FAILED" and failed.tags["failure_reason"] == "OOM"
    assert failed.tags["failure_message"] == "CUDA out of memory"
    assert ("effect/--itl-ms_5/output_throughput/c1/ratio", 1.6, 0) in parent.metrics
    assert ("effect/--itl-ms_5/output_throughput/c1/ci95_low", 0.5, 0) in parent.metrics
    assert parent.tags["verdict/--itl-ms_5/output_throughput/c1"] == "better"


def test_the_digest_changes_with_content_only() -> None:
    first = [p.digest() for p in plans_for(document(), attempts())]
    assert first == [p.digest() for p in plans_for(document(), attempts())]
    changed = attempts()
    changed["x-1"][0]["result"]["points"][0]["output_throughput"] = 81.0
    second = [p.digest() for p in plans_for(document(), changed)]
    assert second[1] != first[1] and second[2] == first[2]


def test_argv_flags_become_params() -> None:
    argv = ["vllm", "serve", "m", "--tp", "8", "--max-num-seqs=256", "--enforce-eager", "--x", "1"]
    assert argv_params(argv) == {
        "argv.program": "vllm serve m",
        "flag.--tp": "8",
        "flag.--max-num-seqs": "256",
        "flag.--enforce-eager": "true",
        "flag.--x": "1",
    }


def test_names_mlflow_accepts() -> None:
    assert metric_key("effect/a=b,c/x") == "effect/a_b_c/x"
    assert len(metric_key("k" * 400)) == 250
    assert variant_label("spec/--itl-ms=5#12") == "--itl-ms=5"
    assert variant_label("spec/baseline") == "baseline"


def test_the_runner_up_interval_is_named_for_no_level_and_its_level_is_recorded() -> None:
    """The race's interval is at its Holm step's level (97.5 % for two contenders): it was
    written as ``ci95_*_pct``."""
    from tunelab.analysis.mlflow.search_plan import search_plan

    search = {
        "objective": {"maximize": "output_throughput"},
        "best": {"trial": 3, "objective": 100.0, "launches": 3,
                 "vs_runner_up": {"trial": 4, "change_pct": 2.4, "interval": [0.5, 4.4],
                                  "confidence": 0.975, "verdict": "better"}},
    }  # fmt: skip
    metrics = {k: v for k, v, _ in search_plan("g-1", search, 0).metrics}
    assert metrics["vs_runner_up/interval_low_pct"] == 0.5
    assert metrics["vs_runner_up/interval_high_pct"] == 4.4
    assert metrics["vs_runner_up/confidence"] == 0.975
    assert not [k for k in metrics if "ci95" in k and k.startswith("vs_runner_up")]
