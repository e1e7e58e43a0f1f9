"""BenchConfig: validation names the field; the proto converts with defaults; presets; points."""

from __future__ import annotations

import pytest

from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.v1 import run_pb2

URL = "http://127.0.0.1:8000"


def cfg(**kw: object) -> BenchConfig:
    values: dict[str, object] = {
        "url": URL, "model": "m", "concurrency": (1,), "input_len": 8, "output_len": 8,
    }  # fmt: skip
    values.update(kw)
    return BenchConfig(**values).with_preset()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"concurrency": (1, 4, 0)}, "concurrency[2]"),
        ({"concurrency": (), "request_rate": 0.0}, "concurrency"),
        ({"request_rate": 3.0}, "concurrency"),  # both a list and a rate
        ({"api": "embeddings"}, "api"),
        ({"url": "127.0.0.1:8000"}, "url"),
        ({"model": "two words"}, "model"),
        ({"input_len": 0}, "input_len"),
        ({"range_ratio": 1.0}, "range_ratio"),
        ({"requests": 5, "duration_seconds": 3.0}, "requests"),
        ({"burstiness": 0.0}, "burstiness"),
        ({"preset": "prefill"}, "preset"),
    ],
)
def test_validation_names_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(BenchConfigError) as err:
        cfg(**kw)
    assert err.value.field == field


def test_points_default_request_counts() -> None:
    points = cfg(concurrency=(1, 64)).points()
    assert [(p.concurrency, p.requests) for p in points] == [(1, 10), (64, 320)]
    assert cfg(concurrency=(2,), duration_seconds=5.0).points()[0].requests == 0
    open_loop = cfg(concurrency=(), request_rate=2.0).points()
    assert [(p.concurrency, p.request_rate, p.requests) for p in open_loop] == [(0, 2.0, 60)]


def test_decode_preset_fills_single_stream_long_output() -> None:
    c = cfg(concurrency=(), request_rate=0.0, input_len=0, output_len=0, preset="decode")
    assert c.concurrency == (1,) and c.output_len == 512 and c.requests == 3 and c.warmup == 1


def test_round_trip_and_endpoint() -> None:
    c = cfg(api="chat", url=URL + "/v1/")
    assert BenchConfig.from_dict(c.to_dict()) == c
    assert c.endpoint == URL + "/v1/chat/completions"
    with pytest.raises(BenchConfigError) as err:
        BenchConfig.from_dict({**c.to_dict(), "bogus": 1})
    assert err.value.field == "bogus"


def test_from_builtin_pb_defaults_and_errors() -> None:
    pb = run_pb2.BuiltinBenchmark(model="m", concurrency=[1, 256], input_len=32, output_len=64)
    c = BenchConfig.from_builtin_pb(pb, "http://127.0.0.1:{port}")
    assert c.url == "http://127.0.0.1:{port}" and c.api == "completions"
    assert c.ignore_eos is True and c.temperature == 0.0 and c.burstiness == 1.0
    pb.ignore_eos = False
    pb.temperature = 0.7
    pb.url = URL
    c = BenchConfig.from_builtin_pb(pb, "unused")
    assert (c.ignore_eos, c.temperature, c.url) == (False, 0.7, URL)
    pb.concurrency.append(-3)
    with pytest.raises(BenchConfigError) as err:
        BenchConfig.from_builtin_pb(pb, URL)
    assert err.value.field == "concurrency[2]"
