"""The engine profile's plan for a profile and a cache reset, and how traces are kept."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from tunelab.agent.engines.profiles import GENERIC, SGLANG, VLLM
from tunelab.agent.engines.profiling import plan, profiler_calls, profiler_setup
from tunelab.agent.engines.traces import keep_traces, listed
from tunelab.bench.config import BenchConfig

TRACES = Path("/state/runs/r1/traces")


def bench(**fields: object) -> dict[str, object]:
    return {"concurrency": [1], "profile_point": -1, "reset_cache": None, **fields}


def test_vllm_profile_adds_its_flag_and_urls_and_no_dev_mode() -> None:
    p = plan(VLLM, ("vllm", "serve", "m"), bench(profile_point=0), TRACES)
    assert p.argv[0] == "--profiler-config"
    assert json.loads(p.argv[1]) == {
        "profiler": "torch", "torch_profiler_dir": str(TRACES),
        "torch_profiler_use_gzip": True, "torch_profiler_with_stack": False,
    }  # fmt: skip
    assert p.env == {} and p.warnings == ()
    assert p.bench == {"profile_start_url": "/start_profile", "profile_stop_url": "/stop_profile"}


def test_a_server_started_with_profile_gets_the_runs_setup_in_its_own_folder() -> None:
    """One mechanism: `server start --profile` and a run's profile: get the same flags/env."""
    folder = Path("/state/servers/s1/traces")
    for engine, argv in ((VLLM, ("vllm", "serve", "m")), (SGLANG, ("sglang",)), (GENERIC, ())):
        setup = profiler_setup(engine, argv, folder)
        run = plan(engine, argv, bench(profile_point=0), folder)
        assert (setup.argv, setup.env) == (run.argv, run.env)
    assert profiler_setup(GENERIC, (), folder).env == {"TUNELAB_PROFILE_DIR": str(folder)}
    own = ("vllm", "serve", "m", "--profiler-config={}")
    assert profiler_setup(VLLM, own, folder).own_config is True
    calls = profiler_calls(SGLANG, folder, ["gpu"])
    assert (calls.start_url, calls.stop_url) == ("/start_profile", "/stop_profile")
    assert json.loads(calls.start_body) == {"output_dir": str(folder), "activities": ["GPU"]}
    assert profiler_calls(GENERIC, folder, []).start_url == ""  # the caller names them
    assert "always" in profiler_calls(VLLM, folder, ["cpu"]).warnings[0]


def test_vllm_keeps_a_users_own_profiler_config_with_a_warning() -> None:
    p = plan(
        VLLM, ("vllm", "serve", "m", "--profiler-config", "{}"), bench(profile_point=0), TRACES
    )
    assert p.argv == () and "its traces are not collected" in p.warnings[0]


def test_reset_defaults_on_for_several_points_on_vllm_and_sglang_only() -> None:
    several = bench(concurrency=[1, 8])
    assert plan(VLLM, (), several, TRACES).env == {"VLLM_SERVER_DEV_MODE": "1"}
    assert plan(VLLM, (), several, TRACES).bench == {"reset_cache_url": "/reset_prefix_cache"}
    assert plan(SGLANG, (), several, TRACES).bench == {"reset_cache_url": "/flush_cache"}
    assert plan(SGLANG, (), several, TRACES).env == {}
    assert plan(VLLM, (), bench(), TRACES).env == {}  # one point: no reset, no dev mode
    quiet = plan(GENERIC, (), several, TRACES)
    assert (quiet.bench, quiet.warnings) == ({}, ())  # the default says nothing on generic
    off = plan(VLLM, (), bench(concurrency=[1, 8], reset_cache=False), TRACES)
    assert off.env == {} and off.bench == {}


def test_reset_defaults_on_for_a_rate_list_and_a_load_search_too() -> None:
    """Several rates, or a find: ladder, are several points on the one server (B5)."""
    for several in (
        bench(concurrency=[], rates=[1.0, 2.0, 4.0]),
        bench(concurrency=[], find_axis="concurrency", find_max=64.0),
        bench(concurrency=[], find_axis="rate", find_max=20.0),
    ):
        p = plan(VLLM, (), several, TRACES)
        assert (p.env, p.bench) == (
            {"VLLM_SERVER_DEV_MODE": "1"}, {"reset_cache_url": "/reset_prefix_cache"},
        )  # fmt: skip
        assert plan(SGLANG, (), several, TRACES).bench == {"reset_cache_url": "/flush_cache"}
        assert plan(GENERIC, (), several, TRACES).bench == {}
        off = plan(VLLM, (), {**several, "reset_cache": False}, TRACES)
        assert off.env == {} and off.bench == {}
    for one in (  # one point: one rate, a request_rate, a ramp
        bench(concurrency=[], rates=[2.0]),
        bench(concurrency=[], request_rate=2.0),
        bench(concurrency=[], ramp="linear", ramp_start_rate=1.0, ramp_end_rate=4.0),
    ):
        assert plan(VLLM, (), one, TRACES).env == {}


def test_reset_default_follows_the_configs_own_point_count() -> None:
    """The plan reads BenchConfig.to_dict(): the default agrees with a real config's sweep."""

    def config(**load: object) -> dict[str, object]:
        c = BenchConfig.from_dict({"url": "http://h:1", "input_len": 8, "output_len": 8, **load})
        return c.to_dict()

    configs = {
        "rates": config(rates=[1.0, 2.0]),
        "find": config(find_axis="rate", find_max=8.0, find_slo={"p99_ttft_ms": 100.0}),
        "concurrencies": config(concurrency=[1, 8]),
        "one rate": config(request_rate=2.0),
        "one c": config(concurrency=[4]),
    }
    on = {name: "VLLM_SERVER_DEV_MODE" in plan(VLLM, (), c, TRACES).env
          for name, c in configs.items()}  # fmt: skip
    assert on == {
        "rates": True, "find": True, "concurrencies": True, "one rate": False, "one c": False,
    }  # fmt: skip


def test_an_explicit_reset_on_generic_without_a_url_warns() -> None:
    p = plan(GENERIC, (), bench(reset_cache=True), TRACES)
    assert p.warnings == ("reset_cache: a generic server needs benchmark.reset_cache_url",)
    assert plan(GENERIC, (), bench(reset_cache=True, reset_cache_url="/r"), TRACES).warnings == ()


def test_sglang_profile_is_an_env_and_a_start_body() -> None:
    p = plan(SGLANG, (), bench(profile_point=0, profile_activities=["gpu"]), TRACES)
    assert p.env == {"SGLANG_TORCH_PROFILER_DIR": str(TRACES)}
    assert json.loads(p.bench["profile_start_body"]) == {
        "output_dir": str(TRACES), "activities": ["GPU"],
    }  # fmt: skip


def test_generic_profile_needs_its_urls() -> None:
    p = plan(GENERIC, (), bench(profile_point=0), TRACES)
    assert p.env == {"TUNELAB_PROFILE_DIR": str(TRACES)} and p.warnings
    ok = plan(GENERIC, (), bench(profile_point=0, profile_start_url="/a", profile_stop_url="/b"),
              TRACES)  # fmt: skip
    assert ok.warnings == ()


def test_keep_traces_gzips_bounds_and_skips_what_is_no_trace(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.pt.trace.json").write_text('{"traceEvents": []}')
    (folder / "b.pt.trace.json.gz").write_bytes(gzip.compress(b"x" * 10) + os.urandom(4000))
    (folder / "c.pt.trace.json.gz").write_bytes(gzip.compress(b"{}"))
    os.symlink("/etc/passwd", folder / "d.json.gz")
    (folder / "sub").mkdir()
    kept = keep_traces(tmp_path, max_bytes=3000)
    names = [t["name"] for t in kept["traces"]]
    assert names == ["a.pt.trace.json.gz", "c.pt.trace.json.gz"]
    assert json.loads(gzip.decompress((folder / names[0]).read_bytes())) == {"traceEvents": []}
    assert (
        not (folder / "a.pt.trace.json").exists() and not (folder / "b.pt.trace.json.gz").exists()
    )
    assert kept["total_bytes"] == sum(t["size_bytes"] for t in kept["traces"])
    warnings = "\n".join(kept["warnings"])
    assert "b.pt.trace.json.gz" in warnings and "over the cap of 3000" in warnings
    assert "'d.json.gz'" in warnings and "'sub'" in warnings
    assert Path("/etc/passwd").exists()  # a link is skipped, never followed or deleted through
    assert listed({"profile": kept}) == set(names)


def test_no_trace_folder_is_a_warning(tmp_path: Path) -> None:
    assert keep_traces(tmp_path, 100)["warnings"] == ["profile: no trace was written"]
