"""The roofline floor on fixed inputs, checked against hand computations."""

from __future__ import annotations

from typing import Any

import pytest

from tunelab.analysis.roofline import (
    ModelBytes,
    annotate_points,
    gpu_bandwidth,
    power_share,
    tpot_floor_seconds,
)

H200 = {"name": "NVIDIA H200", "power_limit_watts": 600.0}


def test_the_manual_sessions_numbers_97_ms_against_a_3_2_ms_floor_is_3_3_percent() -> None:
    # single-stream decode: 15.36 GB of weights over one H200's 4.8 TB/s is 3.2 ms a token
    spec = {"roofline": {"weight_bytes": 15.36e9}, "benchmark": {"input_len": 0, "output_len": 1}}
    points = [{"concurrency": 1, "median_tpot_ms": 97.0}]
    used = annotate_points(points, spec, {"gpus": [H200]})
    assert used is not None and used["memory_bandwidth_bytes_per_second"] == 4.8e12
    assert points[0]["tpot_floor_ms"] == pytest.approx(3.2)
    assert points[0]["roofline_efficiency"] == pytest.approx(3.2 / 97.0)
    assert round(100 * points[0]["roofline_efficiency"], 1) == 3.3


def test_kv_cache_grows_the_floor_with_concurrency_and_context() -> None:
    # Llama-3-8B-like: 16 GB bf16, 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes
    kv = 2 * 32 * 8 * 128 * 2
    model = ModelBytes(weight_bytes=16e9, kv_bytes_per_token=kv)
    context = 1024 + 256 / 2
    for concurrency in (1, 64):
        expected = (16e9 + concurrency * context * kv) / 4.8e12
        assert tpot_floor_seconds(model, concurrency, context, 4.8e12, 1) == pytest.approx(expected)
    # tensor parallel: each GPU reads its slice, in parallel
    assert tpot_floor_seconds(model, 1, 0, 4.8e12, 4) == pytest.approx(16e9 / 4.8e12 / 4)


def test_moe_reads_only_the_experts_the_batch_is_routed_to() -> None:
    model = ModelBytes(
        weight_bytes=100e9, expert_weight_bytes=90e9, experts=64, experts_per_token=4
    )
    assert model.step_weight_bytes(1) == pytest.approx(10e9 + 90e9 * 4 / 64)
    assert model.step_weight_bytes(2) == pytest.approx(10e9 + 90e9 * (1 - (60 / 64) ** 2))
    assert model.step_weight_bytes(4096) == pytest.approx(100e9)  # every expert is hit


def test_tp_and_an_fp8_kv_cache_from_the_server_flags() -> None:
    provenance = {
        "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}] * 8,
        "model": {"weight_bytes": 8e9, "kv_bytes_per_token": 1000, "kv_dtype_bytes": 2},
    }
    spec = {
        "server": {"flags": {"--tp-size": 8, "--kv-cache-dtype": "fp8_e4m3"}},
        "benchmark": {"input_len": 100, "output_len": 0},
    }
    points: list[dict[str, Any]] = [
        {"concurrency": 2, "median_tpot_ms": 10.0},
        {"concurrency": None},
    ]
    used = annotate_points(points, spec, provenance)
    assert used is not None and used["tp"] == 8 and used["kv_bytes_per_token"] == 500
    expected = (8e9 + 2 * 100 * 500) / (1.792e12 * 8)
    assert points[0]["tpot_floor_ms"] == pytest.approx(1000 * expected)
    assert "tpot_floor_ms" not in points[1]  # an open-loop point has no batch size


def test_unknown_inputs_give_no_floor_rather_than_a_guess() -> None:
    points = [{"concurrency": 1, "median_tpot_ms": 5.0}]
    assert annotate_points(points, {}, {"gpus": [H200]}) is None  # no model bytes
    no_gpu = {"roofline": {"weight_bytes": 1e9}}
    assert annotate_points(points, no_gpu, {"gpus": [{"name": "Mystery GPU"}]}) is None
    assert gpu_bandwidth({"name": "Mystery GPU"})[0] is None
    given = {"roofline": {"weight_bytes": 1e9, "memory_bandwidth": 1e12}}
    assert annotate_points(points, given, None) is not None
    assert points[0]["tpot_floor_ms"] == pytest.approx(1.0)


def test_power_share_of_the_limit() -> None:
    summary = {"mean_power_watts_total": 250.0, "gpus": {"0": {"power_limit_watts": 600.0}}}
    assert power_share(summary, None) == pytest.approx(250 / 600)
    # no scraped limit: the one recorded at start
    assert power_share({"mean_power_watts_total": 500.0}, {"gpus": [H200, H200]}) == 500 / 1200
    assert power_share({}, None) is None
