"""The trace summariser: streaming reader, self times, GPU idle, steps, categories, caps."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.key_averages import table_rows
from tunelab.analysis.profiles import TraceError, TraceTooLarge, traceread
from tunelab.analysis.profiles.categories import categorize
from tunelab.analysis.profiles.summary import summarize, to_ns

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"


def _x(name: str, cat: str, ts: float, dur: float, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, **extra}


def _kernel(
    name: str, ts: float, dur: float, stream: int = 7, cat: str = "kernel"
) -> dict[str, Any]:
    return _x(name, cat, ts, dur, pid=0, tid=stream, args={"device": 0, "stream": stream})


def small_trace() -> list[dict[str, Any]]:
    """1000 us of wall time; CPU ops nest; two streams overlap; one marked step per half."""
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        _x("execute_model", "user_annotation", 0, 400),
        _x("execute_model", "user_annotation", 500, 500),
        _x("aten::linear", "cpu_op", 10, 100),  # children: addmm 60 -> self 40
        _x("aten::addmm", "cpu_op", 20, 60),
        _x("aten::silu", "cpu_op", 200, 30),
        _kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", 100, 200),
        _kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", 300, 100),
        _kernel("vectorized_elementwise_kernel<4, silu>", 250, 100, stream=13),  # overlaps
        _kernel("Memcpy HtoD (Pageable -> Device)", 600, 50, cat="gpu_memcpy"),
        _x("end", "cpu_op", 999, 1),
    ]


def write(path: Path, events: Any, gz: bool = False, wrap: bool = True) -> Path:
    body = json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": events}
                      if wrap else events)  # fmt: skip
    if gz:
        with gzip.open(path, "wt") as out:
            out.write(body)
    else:
        path.write_text(body)
    return path


def test_exact_summary_of_a_small_trace(tmp_path: Path) -> None:
    s = summarize([write(tmp_path / "t.json", small_trace())]).to_json()
    assert s["trace_files"] == ["t.json"]
    assert s["wall_ms"] == 1.0
    assert s["gpu_ms"] == 0.45 and s["cpu_ms"] == 0.131
    top = {(t["kind"], t["name"]): (t["self_ms"], t["calls"], t["category"]) for t in s["top"]}
    assert top[("cpu", "aten::linear")] == (0.04, 1, "gemm")
    assert top[("cpu", "aten::addmm")] == (0.06, 1, "gemm")
    assert top[("gpu", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT")] == (0.2, 1, "gemm")
    assert top[("gpu", "Memcpy HtoD (Pageable -> Device)")] == (0.05, 1, "memcpy")
    assert s["top"][0]["name"].startswith("nvjet") and s["top"][0]["share"] == round(200 / 450, 6)
    assert s["categories_basis"] == "gpu"
    assert {k: v["ms"] for k, v in s["categories"].items() if v["ms"]} == {
        "gemm": 0.2, "attention": 0.1, "elementwise_norm": 0.1, "memcpy": 0.05,
    }  # fmt: skip
    # GPU busy = union [100, 400) + [600, 650) = 350 us of 1000.
    assert s["gpu_idle_share"] == 0.65
    assert s["devices"] == [{"file": 0, "device": 0, "busy_ms": 0.35, "idle_share": 0.65}]
    streams = {st["stream"]: st for st in s["streams"]}
    assert streams[7]["busy_ms"] == 0.35 and streams[7]["span_ms"] == 0.55
    assert streams[13]["idle_share"] == 0.0
    assert s["steps"] == {
        "marker": "execute_model", "count": 2, "mean_ms": 0.45, "p50_ms": 0.45, "max_ms": 0.5,
        "decode_count": None, "decode_mean_ms": None,
    }  # fmt: skip


def test_an_op_whose_only_child_has_its_name_is_one_call_as_key_averages_counts_it(
    tmp_path: Path,
) -> None:
    """torch merges such a child into its parent (aten::div_ dispatching to aten::div_, seen
    in a real CPU trace: 580 events, 290 calls); a same-name child beside another is its own."""
    events = [
        _x("aten::div_", "cpu_op", 0, 100),  # -> div_ -> div_: one call, 100 us of self time
        _x("aten::div_", "cpu_op", 10, 80),
        _x("aten::div_", "cpu_op", 20, 40),
        _x("aten::add_", "cpu_op", 200, 100),  # two children, one of its name: three calls
        _x("aten::add_", "cpu_op", 210, 20),
        _x("aten::mul", "cpu_op", 240, 20),
        _x("aten::add_", "cpu_op", 270, 20),
    ]
    top = {t["name"]: t for t in summarize([write(tmp_path / "t.json", events)]).to_json()["top"]}
    assert (top["aten::div_"]["calls"], top["aten::div_"]["self_ms"]) == (1, 0.1)
    assert (top["aten::add_"]["calls"], top["aten::add_"]["self_ms"]) == (3, 0.08)


def test_order_gzip_and_the_bare_array_form_do_not_change_the_summary(tmp_path: Path) -> None:
    events = small_trace()
    plain = summarize([write(tmp_path / "a.json", events)]).to_json()
    shuffled = summarize([write(tmp_path / "b.json.gz", events[::-1], gz=True)]).to_json()
    bare = summarize([write(tmp_path / "c.trace", events, wrap=False)]).to_json()
    for other in (shuffled, bare):
        other.pop("trace_files")
    plain.pop("trace_files")
    assert shuffled == plain
    assert bare == plain


def test_the_reader_streams_across_chunk_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a 7-character window refill every value straddles chunks; the result is the same."""
    events = small_trace()
    path = write(tmp_path / "t.json", events)
    monkeypatch.setattr(traceread, "CHUNK_CHARS", 7)
    assert list(traceread.iter_events(path)) == events


def test_a_value_over_the_window_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "t.json", [_x("x" * 5000, "cpu_op", 0, 1)])
    monkeypatch.setattr(traceread, "CHUNK_CHARS", 64)
    monkeypatch.setattr(traceread, "MAX_VALUE_CHARS", 1000)
    with pytest.raises(TraceError, match="larger than 1000"):
        list(traceread.iter_events(path))


def test_a_trace_over_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", small_trace())
    with pytest.raises(TraceTooLarge, match="over the cap of 100"):
        summarize([path], max_bytes=100)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ('{"traceEvents": [{"ph": "X"', "not complete JSON"),
        ('{"schemaVersion": 1}', "no traceEvents"),
        ("hello", "expected one of"),
        ("", "the end of the file"),
    ],
)
def test_what_is_not_a_trace_is_a_trace_error(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(body)
    with pytest.raises(TraceError, match=match):
        summarize([path])


def test_a_truncated_gzip_is_a_trace_error(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json.gz", small_trace() * 50, gz=True)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(TraceError):
        summarize([path])


def test_timestamps_keep_their_nanoseconds() -> None:
    assert to_ns("5305647792836.443") == 5305647792836443
    assert to_ns(12) == 12000
    assert to_ns("1.5e3") == 1500000
    assert to_ns("0.0005") == 1
    assert to_ns(None) is None


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm"),
        ("cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn>", "gemm"),
        ("triton_tem_fused_mm_0", "gemm"),
        ("aten::addmm", "gemm"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128", "attention"),
        ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64>>", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("void vllm::paged_attention_v2_kernel<bf16>", "attention"),
        ("BatchDecodeWithPagedKVCacheKernel", "attention"),
        ("fused_moe_kernel", "moe"),
        ("void cutlass::device_kernel<grouped_gemm_sm90>", "moe"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgs)", "communication"),
        ("void vllm::cross_device_reduce_1stage<bf16, 2>", "communication"),
        ("Memcpy DtoD (Device -> Device)", "memcpy"),
        ("at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add>", "elementwise_norm"),
        ("triton_poi_fused_add_mul_0", "elementwise_norm"),
        ("void vllm::rms_norm_kernel<bf16>", "elementwise_norm"),
        ("aten::view", "other"),
    ],
)  # fmt: skip
def test_category_patterns_know_todays_kernel_names(name: str, category: str) -> None:
    assert categorize(name) == category


def test_memcpy_events_are_copies_whatever_their_name() -> None:
    assert categorize("anything", "gpu_memset") == "memcpy"


def test_the_committed_cpu_trace_has_its_exact_summary() -> None:
    """torch 2.13.0+cpu, benchmarks/profile_capture.py --device cpu --steps 3; the self times
    equal what torch's own key_averages() said for the same run (key_averages.json beside it)."""
    folder = FIXTURES / "cpu_torch"
    s = summarize([folder / "trace.json.gz"], top=4).to_json()
    assert s["wall_ms"] == 106.702 and s["cpu_ms"] == 103.195 and s["gpu_idle_share"] is None
    assert [(t["name"], t["self_ms"], t["calls"], t["category"]) for t in s["top"]] == [
        ("aten::mm", 68.316, 12, "gemm"),
        ("aten::silu", 13.107, 3, "elementwise_norm"),
        ("aten::sum", 11.316, 3, "elementwise_norm"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", 7.762, 3, "attention"),
    ]
    assert s["categories"]["gemm"] == {"ms": 68.804, "share": 0.666738}
    assert s["steps"]["count"] == 3
    rows = json.loads((folder / "key_averages.json").read_text())["rows"]
    for entry in s["top"]:
        assert entry["self_ms"] == round(rows[entry["name"]]["self_cpu_us"] / 1000, 3)
        assert entry["calls"] == rows[entry["name"]]["calls"]


def test_the_committed_vllm_trace_has_its_exact_summary() -> None:
    """vLLM 0.32 (CPU) under the agent, tests/engines/test_vllm_profile.py: 8 requests at
    concurrency 2, the whole point profiled; self times equal vLLM's own key_averages table."""
    folder = FIXTURES / "vllm_cpu"
    s = summarize([folder / "rank0.pt.trace.json.gz"], top=6, output_tokens=256)
    assert (s.events, s.wall_ms, s.cpu_ms, s.gpu_idle_share) == (67418, 4639.198, 1107.983, None)
    assert [(t.name, t.self_ms, t.calls, t.category) for t in s.top] == [
        ("_C::onednn_mm", 353.942, 1188, "gemm"),
        ("aten::sum", 66.6, 660, "elementwise_norm"),
        ("aten::slice", 61.84, 8487, "other"),
        ("aten::to", 55.578, 6204, "memcpy"),
        ("vllm::unified_kv_cache_update", 55.286, 264, "attention"),
        ("_C::cpu_attention_with_kv_cache", 42.255, 264, "attention"),
    ]
    assert s.steps is not None and (s.steps.marker, s.steps.count) == ("execute_context_", 133)
    assert s.steps.decode_count is not None and s.steps.decode_count > 100
    table = table_rows((folder / "rank0.profiler_out.txt").read_text())
    for t in s.top:
        self_ms, calls = table[t.name]
        assert self_ms == pytest.approx(t.self_ms, abs=0.001) and calls == t.calls, t.name


def test_the_committed_h200_trace_has_its_exact_summary() -> None:
    """torch 2.11.0+cu130 on an H200 (benchmarks/profile_h200.sh): bf16 GEMMs (cuBLASLt's
    nvjet_sm90_*) and cuDNN's flash SDPA, 4 steps with a 2 ms CPU gap each; every kernel's time
    equals torch's own key_averages() for the same run (key_averages.json beside it)."""
    folder = FIXTURES / "cuda_h200_default"
    s = summarize([folder / "trace.json.gz"], top=40)
    assert (s.events, s.wall_ms, s.gpu_ms, s.gpu_idle_share) == (570, 22.264, 17.888, 0.196524)
    assert s.categories_basis == "gpu"
    assert {k: v for k, v in s.categories.items() if v} == {
        "gemm": 16.186, "attention": 0.616, "elementwise_norm": 1.07, "memcpy": 0.017,
    }  # fmt: skip
    gpu = [t for t in s.top if t.kind == "gpu"]
    assert [(t.name[:24], t.self_ms, t.calls, t.category) for t in gpu[:4]] == [
        ("nvjet_sm90_tst_256x128_6", 6.553, 8, "gemm"),
        ("nvjet_sm90_tst_192x192_6", 5.539, 4, "gemm"),
        ("nvjet_sm90_tst_192x192_6", 4.095, 4, "gemm"),
        ("cudnn_generated_fort_nat", 0.616, 4, "attention"),
    ]
    (stream,) = s.streams
    assert (stream.stream, stream.events, stream.idle_share) == (7, 56, 0.008151)
    rows = json.loads((folder / "key_averages.json").read_text())["rows"]
    for entry in gpu:
        assert entry.self_ms == pytest.approx(rows[entry.name]["self_device_us"] / 1000, abs=0.001)
        assert entry.calls == rows[entry.name]["calls"]
    cpu = [t for t in s.top if t.kind == "cpu"]  # ops, and the runtime's launches beside them
    assert {"cudaLaunchKernel", "cuLaunchKernelEx"} <= {t.name for t in cpu}
    for entry in cpu:
        assert entry.calls == rows[entry.name]["calls"], entry.name


def test_the_diff_of_two_h200_traces_shows_attention_moving_to_gemm_and_softmax() -> None:
    """SDPA's math backend instead of cuDNN's flash kernel: the bf16 GEMMs stay, attention's
    kernel goes, and its matmuls and softmax appear as fp32 GEMM and elementwise work."""
    from tunelab.analysis.profiles.diff import PER_STEP, diff

    a = summarize([FIXTURES / "cuda_h200_default" / "trace.json.gz"])
    b = summarize([FIXTURES / "cuda_h200_math" / "trace.json.gz"])
    d = diff([a], [b], top=3)
    assert d.unit == PER_STEP and d.basis == "gpu"
    rows = {r.name: r for r in d.categories}
    assert (round(rows["attention"].a, 4), rows["attention"].b) == (0.154, 0.0)
    assert round(rows["gemm"].delta, 4) == 2.9648
    assert round(rows["elementwise_norm"].delta, 4) == 4.1355
    assert d.kernels[0].name.startswith("sm80_xmma_gemm_f32f32") and d.kernels[0].a == 0.0
    assert d.gpu_idle_share == (0.196524, 0.077001)
