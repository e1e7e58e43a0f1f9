"""The load generator drives the engine's profiler and cache endpoints (a real simulator process
with vLLM's flag and endpoints): a profiled window, a stop that times out, cache resets."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tunelab.analysis.profiles.summary import summarize
from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.bench.sweep import run_sweep


def _ready(proc: SimulatorProcess) -> dict[str, object]:
    deadline = time.monotonic() + 10
    while True:
        try:
            with urllib.request.urlopen(proc.url + "/sim/stats", timeout=5) as resp:
                stats: dict[str, object] = json.loads(resp.read())
            if stats["ready"]:
                return stats
        except OSError:
            pass
        assert time.monotonic() < deadline, proc.log()
        time.sleep(0.02)


def _config(url: str, **fields: object) -> BenchConfig:
    base: dict[str, object] = {
        "url": url, "model": "tunelab-sim", "concurrency": [2, 4], "requests": 8,
        "input_len": 4, "output_len": 8,
    }  # fmt: skip
    return BenchConfig.from_dict({**base, **fields})


def _profiled(url: str, **fields: object) -> BenchConfig:
    return _config(
        url,
        profile_point=1,
        profile_start_url=url + "/start_profile",
        profile_stop_url=url + "/stop_profile",
        **fields,
    )


def test_a_profiled_point_writes_a_trace_and_records_its_window(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    flag = json.dumps({"profiler": "torch", "torch_profiler_dir": str(traces)})
    with SimulatorProcess(["--itl-ms", "5", "--profiler-config", flag], tmp_path / "s.log") as sim:
        _ready(sim)
        doc = run_sweep(_profiled(sim.url))
        stats = _ready(sim)
    first, second = doc["points"]
    assert "profile" not in first
    window = second["profile"]
    assert window["ok"] is True and window["warning"] is None
    assert window["requests"] == 8 and window["output_tokens"] == 64  # the whole point
    assert not [w for w in second["warnings"] if "profile" in w]
    assert stats["profiling"] is False and stats["starts"] == stats["stops"] == 1
    (trace,) = traces.iterdir()
    assert trace.name.endswith(".pt.trace.json.gz")
    summary = summarize([trace])
    assert summary.steps is not None and summary.steps.marker == "execute_model"


def test_a_stop_that_times_out_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    flag = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path / "t")})
    args = ["--itl-ms", "2", "--profiler-config", flag, "--profile-stop-delay", "3"]
    with SimulatorProcess(args, tmp_path / "s.log") as sim:
        _ready(sim)
        doc = run_sweep(_profiled(sim.url, profile_stop_timeout_s=0.5, profile_seconds=0.1))
        stats = _ready(sim)
    assert doc["status"] == "completed"
    point = doc["points"][1]
    assert point["completed"] == 8
    assert point["profile"]["ok"] is False
    assert "no answer from" in point["profile"]["warning"]
    assert "retried" in point["profile"]["stop"]["error"]  # sent twice: never left profiling
    assert any(w.startswith("point 2/2: profile: stop failed") for w in doc["warnings"])
    assert stats["profiling"] is False and stats["stops"] == 2


def test_a_server_without_a_profiler_gives_a_warning(tmp_path: Path) -> None:
    with SimulatorProcess(["--itl-ms", "1"], tmp_path / "s.log") as sim:
        _ready(sim)
        doc = run_sweep(_profiled(sim.url))
    point = doc["points"][1]
    assert point["completed"] == 8
    assert point["profile"]["warning"].startswith("profile: start failed: HTTP 404")
    assert point["profile"]["stop"] is not None  # a stop is sent after any start


def test_cache_reset_before_each_point_and_a_failed_one_marks_the_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SimulatorProcess(["--itl-ms", "1"], tmp_path / "a.log") as sim:  # no dev mode: 404
        _ready(sim)
        doc = run_sweep(_config(sim.url, reset_cache_url=sim.url + "/reset_prefix_cache"))
    for point in doc["points"]:
        assert point["cache_reset"]["ok"] is False and point["cache_reset"]["status"] == 404
        assert any(w.startswith("cache reset failed: HTTP 404") for w in point["warnings"])
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    with SimulatorProcess(["--itl-ms", "1"], tmp_path / "b.log") as sim:
        _ready(sim)
        doc = run_sweep(
            _config(sim.url, reset_cache_url=sim.url + "/reset_prefix_cache", warmup_seconds=0.2)
        )
        stats = _ready(sim)
    assert [p["cache_reset"]["ok"] for p in doc["points"]] == [True, True]
    assert stats["cache_resets"] == 2
    assert all(p["completed"] == 8 for p in doc["points"])  # the warm-up is not counted


def test_profile_settings_are_validated() -> None:
    with pytest.raises(BenchConfigError, match="profile_point"):
        _config("http://127.0.0.1:1", profile_point=2, profile_start_url="http://x/a",
                profile_stop_url="http://x/b")  # fmt: skip
    with pytest.raises(BenchConfigError, match="profile_stop_url"):
        _config("http://127.0.0.1:1", profile_point=0, profile_stop_url="stop")
    with pytest.raises(BenchConfigError, match="profile_start_body"):
        _profiled("http://127.0.0.1:1", profile_start_body="{")


def test_tunelab_bench_profile_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunelab.cli.main import main

    traces = tmp_path / "traces"
    flag = json.dumps({"profiler": "torch", "torch_profiler_dir": str(traces)})
    with SimulatorProcess(["--itl-ms", "2", "--profiler-config", flag], tmp_path / "s.log") as sim:
        _ready(sim)
        argv = ["bench", "--url", sim.url, "--model", "tunelab-sim", "--concurrency", "1,2"]
        argv += ["--requests", "4", "--input-len", "4", "--output-len", "4", "--json"]
        argv += ["--profile", "--profile-point", "1", "--warmup-time", "0.1s"]
        argv += ["--reset-cache-url", "/flush_cache"]
        assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["points"][1]["profile"]["ok"] is True and "profile" not in doc["points"][0]
    assert [p["cache_reset"]["ok"] for p in doc["points"]] == [True, True]
    assert len(list(traces.iterdir())) == 1
    bad = ["bench", "--url", "http://127.0.0.1:1", "--concurrency", "1", "--requests", "1"]
    assert main([*bad, "--input-len", "1", "--output-len", "1", "--profile", "soon"]) == 2
