"""A load search in the load generator's settings: read from the proto, checked, and no fixed
sweep points (each load is chosen from the last point's figures)."""

from __future__ import annotations

import pytest

from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.v1 import run_pb2


def builtin(**fields: object) -> run_pb2.BuiltinBenchmark:
    pb = run_pb2.BuiltinBenchmark(model="m", input_len=8, output_len=8, find_axis="concurrency",
                                  find_max=256)  # fmt: skip
    pb.find_slo["p99_tpot_ms"] = 50.0
    for name, value in fields.items():
        setattr(pb, name, value)
    return pb


def test_a_load_search_reads_from_the_proto_and_has_no_fixed_points() -> None:
    config = BenchConfig.from_builtin_pb(builtin(), "http://127.0.0.1:1")
    assert (config.find_axis, config.find_max, config.find_slo) == (
        "concurrency",
        256.0,
        {"p99_tpot_ms": 50.0},
    )
    assert config.points() == []
    point = config.point_at(3, 16.0)
    assert (point.index, point.concurrency, point.requests) == (3, 16, 80)
    assert BenchConfig.from_dict(config.to_dict()) == config  # the agent's record reads back


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"find_axis": "tokens"}, "find_axis"),
        ({"find_max": 0.0}, "find_max"),
        ({"request_rate": 5.0}, "find_axis"),
    ],
)
def test_a_bad_load_search_is_refused_naming_the_field(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(BenchConfigError) as caught:
        BenchConfig.from_builtin_pb(builtin(**fields), "http://127.0.0.1:1")
    assert caught.value.field == field


def test_a_load_search_bounds_only_latency_fields() -> None:
    pb = builtin()
    pb.find_slo["output_throughput"] = 5.0
    with pytest.raises(BenchConfigError, match="unknown point field"):
        BenchConfig.from_builtin_pb(pb, "http://127.0.0.1:1")


def test_a_plateau_reads_from_the_proto_and_is_checked() -> None:
    config = BenchConfig.from_builtin_pb(builtin(find_plateau=0.05), "http://127.0.0.1:1")
    assert config.find_plateau == 0.05
    assert BenchConfig.from_dict(config.to_dict()) == config
    for bad, extra in ((1.5, {}), (-0.1, {}), (0.05, {"find_axis": "", "concurrency": [1]})):
        pb = builtin(find_plateau=bad, **{k: v for k, v in extra.items() if k != "concurrency"})
        if "concurrency" in extra:
            pb.concurrency.extend([1])
            pb.ClearField("find_slo")
        with pytest.raises(BenchConfigError) as caught:
            BenchConfig.from_builtin_pb(pb, "http://127.0.0.1:1")
        assert caught.value.field == "find_plateau"
