"""Two profiles side by side: per category, top changed kernels, units, intervals; the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tunelab.analysis.profiles.diff import PER_SECOND, PER_STEP, PER_TOKEN, diff
from tunelab.analysis.profiles.summary import summarize
from tunelab.cli.main import main


def _kernel(name: str, ts: int, dur: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


def _trace(path: Path, gemm_us: int, attention_us: int, steps: int = 2) -> Path:
    """``steps`` steps of 1000 us, each with one GEMM and one attention kernel."""
    events: list[dict[str, Any]] = []
    for step in range(steps):
        t0 = step * 1000
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": "execute_model", "ts": t0, "dur": 1000}
        )
        events.append(_kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", t0, gemm_us))
        events.append(_kernel("flash_fwd_kernel", t0 + gemm_us, attention_us))
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_diff_per_category_and_kernel_per_step(tmp_path: Path) -> None:
    a = summarize([_trace(tmp_path / "a.json", gemm_us=300, attention_us=100)])
    b = summarize([_trace(tmp_path / "b.json", gemm_us=100, attention_us=100)])
    d = diff([a], [b]).to_json()
    assert d["unit"] == PER_STEP and d["basis"] == "gpu" and d["repeats"] == [1, 1]
    rows = {r["name"]: r for r in d["categories"]}
    assert rows["gemm"] == {
        "name": "gemm", "category": "gemm", "a": 0.3, "b": 0.1, "delta": -0.2, "ratio": 0.3333,
        "interval": None,
    }  # fmt: skip
    assert rows["attention"]["delta"] == 0.0 and rows["attention"]["ratio"] == 1.0
    assert d["kernels"][0]["name"] == "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"
    assert d["kernels"][0]["delta"] == -0.2
    assert d["gpu_idle_share"] == [0.6, 0.8]


def test_diff_per_output_token_when_tokens_are_known(tmp_path: Path) -> None:
    a = summarize([_trace(tmp_path / "a.json", 300, 100)], output_tokens=10)
    b = summarize([_trace(tmp_path / "b.json", 100, 100)], output_tokens=20)
    d = diff([a], [b])
    assert d.unit == PER_TOKEN
    gemm = d.categories[0]
    assert gemm.a == pytest.approx(0.06) and gemm.b == pytest.approx(0.01)


def test_diff_per_second_without_steps_or_tokens(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(
        json.dumps({"traceEvents": [_kernel("nvjet_x", 0, 500), _kernel("y", 500, 500)]})
    )
    s = summarize([path])
    d = diff([s], [s])
    assert d.unit == PER_SECOND
    assert d.categories[0].a == pytest.approx(500.0)  # 0.5 ms of GEMM in 1 ms: 500 ms/s


def test_repeats_give_an_interval_that_holds_the_difference(tmp_path: Path) -> None:
    side_a = [summarize([_trace(tmp_path / f"a{i}.json", 300 + i * 10, 100)]) for i in range(3)]
    side_b = [summarize([_trace(tmp_path / f"b{i}.json", 100 + i * 10, 100)]) for i in range(3)]
    gemm = diff(side_a, side_b).categories[0]
    assert gemm.delta == pytest.approx(-0.2)
    assert gemm.interval is not None
    low, high = gemm.interval
    assert low < -0.2 < high and high < 0  # the change is clear of zero


def test_cli_summary_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _trace(tmp_path / "a.json", 300, 100)
    b = _trace(tmp_path / "b.json", 100, 100)
    assert main(["profile", "--trace", str(a), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"trace_files", "top", "categories", "gpu_idle_share"} <= set(out)
    assert set(out["top"][0]) >= {"name", "self_ms", "calls", "share", "category"}
    assert main(["profile", "--trace", str(a), "--vs", str(b)]) == 0
    text = capsys.readouterr().out
    assert "gemm" in text and "0.33x" in text
    assert main(["profile", "--trace", str(tmp_path)]) == 0  # a folder is one run's files
    assert "a.json, b.json" in capsys.readouterr().out


def test_cli_refuses_what_is_no_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert main(["profile", "--trace", str(bad)]) == 2
    assert "no traceEvents" in capsys.readouterr().err
    assert main(["profile", "--trace", str(tmp_path / "missing.json")]) == 2
    assert main(["profile"]) == 2
