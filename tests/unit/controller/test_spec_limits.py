"""Unit: hostile specs are refused before expansion, quickly, with the field named; the bounds
are one table shared with the agent, inside each field's wire type."""

from __future__ import annotations

import resource
import time

import pytest

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.wire import run_spec_from_pb
from tunelab.common.specbounds import FIELD_RANGES, field_descriptor, wire_range
from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.spec.limits import SpecLimits
from tunelab.controller.spec.render import to_run_spec

BASE = """
name: sim
server:
  command: [python, -m, tunelab.bench.simulator]
  flags: {--port: "{port}"}
  ready: {model: sim-model}
benchmark: {concurrency: [1], requests: 20, input_len: 64, output_len: 32}
"""
# 9 levels of 9 aliases each: 9**9 = 387 million strings once expanded, from 700 bytes of YAML.
LAUGHS = "\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def refused(text: str, limits: SpecLimits | None = None) -> tuple[str, float]:
    """The error text and the CPU seconds it took to refuse ``text`` (CPU time, not wall time: a
    busy machine stretches the wall clock, never the work done)."""
    start = time.process_time()
    with pytest.raises(SpecError) as info:
        expand_text(text, "x.yaml", limits) if limits else expand_text(text, "x.yaml")
    return str(info.value), time.process_time() - start


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE + "repeat: 1000000000\n", "more than 10000 experiments"),
        (
            BASE
            + "matrix:\n"
            + "".join(f"  server.env.V{i}: [a,b,c,d,e,f,g,h,i,j]\n" for i in range(9)),
            "more than 10000 experiments",
        ),
        (BASE + "matrix: {benchmark.seed: [1, 2, 3]}\nrepeat: 4000\n", "at least 12000"),
        (LAUGHS + "\n" + BASE, "once aliases are expanded"),
        (BASE + "server: &s {command: [*s]}\n", "refers to a node that contains it"),
        (BASE.replace("ready:", "x: " + "[" * 200 + "]" * 200 + "\n  ready:"), "nested deeper"),
    ],
    ids=["repeat", "matrix", "matrix-times-repeat", "billion-laughs", "recursive", "deep"],
)
def test_too_large_specs_are_refused_before_expansion(text: str, message: str) -> None:
    before = peak_rss_mb()
    error, seconds = refused(text)
    assert message in error
    assert seconds < 1.0  # CPU: arithmetic and counting only, never expansion
    assert peak_rss_mb() - before < 100


def test_the_variant_cap_is_configurable_and_counts_every_document() -> None:
    two = BASE + "repeat: 2\n---\n" + BASE.replace("name: sim", "name: other") + "repeat: 2\n"
    assert len(expand_text(two)) == 4
    error, _ = refused(two, SpecLimits(max_variants=3))
    assert "more than 3 experiments (at least 4)" in error


def test_oversized_text_is_refused_by_size() -> None:
    error, _ = refused(BASE + "#" + "x" * 2_000_000 + "\n")
    assert "the limit is 1048576" in error


def test_a_small_alias_is_still_allowed() -> None:
    text = BASE + "matrix: {server.env.A: &v [x, y], server.env.B: *v}\n"
    assert [e.varied for e in expand_text(text)][-1] == {"server.env.A": "y", "server.env.B": "y"}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("input_len: 64", "benchmark.input_len: must be in 0-10000000, got 1000000000000"),
        ("requests: 20", "benchmark.requests: must be in 0-100000000"),
        ("concurrency: [1]", "benchmark.concurrency[0]: must be in 1-100000"),
    ],
)
def test_integers_beyond_their_range_name_the_field(edit: str, message: str) -> None:
    key = edit.split(":")[0]
    value = {"input_len": "1000000000000", "requests": "3000000000", "concurrency": "[200000]"}
    error, _ = refused(BASE.replace(edit, f"{key}: {value[key]}"))
    assert message in error


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("max_duration: .nan\n", "max_duration"),
        ("max_duration: .inf\n", "max_duration"),
        ("max_duration: nan\n", "max_duration"),
        ("server: {command: [a], ready: {model: m, timeout: .inf}}\n", "server.ready.timeout"),
    ],
)
def test_nan_and_inf_are_refused(extra: str, field: str) -> None:
    error, _ = refused(BASE + extra)
    assert f"{field}: expected a finite duration" in error


def test_nan_rate_is_refused() -> None:
    text = BASE.replace("concurrency: [1], requests: 20", "rate: .nan, requests: 20")
    error, _ = refused(text)
    assert "benchmark.rate: must be a finite number" in error


def test_the_agent_refuses_what_the_controller_refuses_with_the_same_rule() -> None:
    """A spec the controller would refuse, forced into a RunSpec past its checks, is refused by
    the agent's run_spec_from_pb naming the same field and bound."""
    (experiment,) = expand_text(BASE)
    spec = dict(experiment.spec, max_duration=40 * 86400.0)
    with pytest.raises(InvalidSpec) as info:
        run_spec_from_pb(to_run_spec(spec, "x-1-a1", []))
    assert info.value.field == "max_duration_seconds"
    error, _ = refused(BASE + "max_duration: 40d\n")
    assert f"max_duration: {info.value.problem}" in error
    pb = to_run_spec(experiment.spec, "x-1-a1", [])
    pb.benchmark.builtin.input_len = 2**31 - 1
    with pytest.raises(InvalidSpec) as info:
        run_spec_from_pb(pb)
    assert info.value.field == "benchmark.input_len"


def test_a_rule_only_the_agent_had_is_now_checked_at_submission() -> None:
    """ready_path with a space passed the controller and failed at dispatch before."""
    text = BASE.replace("ready: {model: sim-model}", 'ready: {model: sim-model, path: "/he alth"}')
    error, _ = refused(text)
    assert "spec.ready_path: expected an absolute HTTP path" in error


@pytest.mark.parametrize("key", sorted(FIELD_RANGES))
def test_every_range_fits_its_wire_type(key: str) -> None:
    bounds, wire = FIELD_RANGES[key], wire_range(key)
    assert field_descriptor(key) is not None
    if wire is not None:
        assert wire.low <= bounds.low <= bounds.high <= wire.high


def test_ten_thousand_variants_are_accepted() -> None:
    text = BASE + "matrix: {benchmark.seed: [" + ",".join(str(i) for i in range(2500)) + "]}\n"
    text += "repeat: 4\n"
    assert len(expand_text(text)) == 10_000


def _distinct(count: int, anchor: str = "s") -> str:
    """``count`` distinct matrix values, each a list holding the anchored big string."""
    return ", ".join(f"[*{anchor}, {i}]" for i in range(count))


def test_the_label_bomb_is_refused_by_bytes_before_any_label_is_built() -> None:
    # two axes of 60 values, each holding one 4 KB string through an alias: a 10 KB file whose
    # 3,600 variants carry 8 KB labels and copies (issue 23: 401 KB took the controller to 3 GB)
    big = "A" * 4000
    text = BASE + f"matrix:\n  server.flags.--a: [[&s {big}, -1], {_distinct(59)}]\n"
    text += f"  server.flags.--b: [{_distinct(60)}]\n"
    assert len(text) < 12_000
    before = peak_rss_mb()
    error, _ = refused(text)
    assert "bytes of text in all (variants and their labels)" in error
    assert peak_rss_mb() - before < 100


def test_a_document_whose_aliases_expand_past_the_byte_budget_is_refused_while_composing() -> None:
    big = "A" * 4000
    row = "[" + ", ".join(["*s"] * 100) + "]"  # 400 KB once expanded
    text = BASE + f"x: [&s {big}]\nmatrix:\n  server.flags.--a: [{', '.join([row] * 50)}]\n"
    error, _ = refused(text)
    assert "bytes of text once aliases are expanded" in error


def test_argv_and_env_past_the_monitors_launch_limit_are_refused_at_submission() -> None:
    # each value is within its own bound (32 KB), together they pass what the monitor reads:
    # a 30 KB spec whose env expands to 1.2 MB (issue 23) failed only at dispatch
    env = f"    V0: &big {'x' * 30000}\n" + "".join(f"    V{i}: *big\n" for i in range(1, 40))
    text = BASE.replace("  ready:", f"  env:\n{env}  ready:")
    assert len(text) < 32_000
    error, _ = refused(text)
    assert "argv and env take" in error and "as sent to the server's monitor" in error


def test_the_launch_limit_is_the_monitors() -> None:
    from tunelab.agent.procs.monitor import MAX_LAUNCH
    from tunelab.common.specbounds import MAX_LAUNCH_BYTES

    assert MAX_LAUNCH == MAX_LAUNCH_BYTES
