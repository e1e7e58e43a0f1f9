"""Unit: `profile:`, `benchmark.reset_cache` and a warm-up by time in a spec, to the RunSpec."""

from __future__ import annotations

import pytest

from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.spec.render import to_run_spec
from tunelab.v1 import run_pb2

BASE = """
name: sim
server:
  command: [python, -m, tunelab.bench.simulator]
  flags: {--port: "{port}"}
  ready: {model: sim-model}
benchmark: {concurrency: [1, 8], requests: 20, input_len: 64, output_len: 32}
"""


def run_of(text: str) -> run_pb2.RunSpec:
    return to_run_spec(expand_text(text)[0].spec, "x-1-a1", gpus=[])


def test_profile_with_a_window_alone_takes_the_defaults() -> None:
    builtin = run_of(BASE + "profile: {window: 5s}\n").benchmark.builtin
    assert builtin.HasField("profile")
    p = builtin.profile
    assert (p.point, p.window_seconds, p.window_requests) == (0, 5.0, 0)
    assert list(p.activities) == ["cpu", "gpu"] and p.max_bytes == 500_000_000
    assert p.stop_timeout_seconds == 120.0 and not p.start_url
    assert not builtin.HasField("reset_cache")  # unset: the agent's default


def test_no_profile_and_no_reset_leave_the_message_as_before() -> None:
    builtin = run_of(BASE).benchmark.builtin
    assert not builtin.HasField("profile") and not builtin.HasField("reset_cache")
    assert "profile" not in expand_text(BASE)[0].spec


def test_a_full_profile_reset_and_warmup_by_time() -> None:
    text = BASE.replace("output_len: 32}", "output_len: 32, reset_cache: false, warmup: 10s}") + (
        "profile: {point: 1, requests: 16, activities: [gpu], max_bytes: 1000000,\n"
        "          start_url: /start, stop_url: 'http://127.0.0.1:9/stop', stop_timeout: 5m}\n"
    )
    builtin = run_of(text).benchmark.builtin
    assert builtin.HasField("reset_cache") and builtin.reset_cache is False
    assert builtin.warmup_seconds == 10.0 and builtin.warmup == 0
    p = builtin.profile
    assert (p.point, p.window_requests, list(p.activities)) == (1, 16, ["gpu"])
    assert (p.start_url, p.stop_url, p.stop_timeout_seconds) == (
        "/start",
        "http://127.0.0.1:9/stop",
        300,
    )


@pytest.mark.parametrize(
    ("profile", "path"),
    [
        ("{point: 2}", "profile.point"),
        ("{window: 5s, requests: 3}", "profile"),
        ("{activities: [tpu]}", "profile.activities[0]"),
        ("{start_url: start}", "profile.start_url"),
        ("{windw: 5s}", "profile.windw"),
        ("{max_bytes: 0}", "profile.max_bytes"),
    ],
)
def test_bad_profiles_name_their_field(profile: str, path: str) -> None:
    with pytest.raises(SpecError) as caught:
        expand_text(BASE + f"profile: {profile}\n")
    assert path in [issue.path for issue in caught.value.issues]


def test_a_profile_needs_the_builtin_benchmark() -> None:
    text = BASE.replace(
        "benchmark: {concurrency: [1, 8], requests: 20, input_len: 64, output_len: 32}",
        "benchmark: {command: [x], result_file: r.json}",
    )
    with pytest.raises(SpecError) as caught:
        expand_text(text + "profile: {window: 5s}\n")
    assert "profile" in [issue.path for issue in caught.value.issues]
