"""ProfileServer's settings: defaults filled, bounds checked with the field named."""

from __future__ import annotations

import math

import pytest

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.servers.profiler import (
    DEFAULT_MAX_BYTES,
    DEFAULT_STOP_TIMEOUT_S,
    MAX_WINDOW_S,
    ProfileRequest,
)


def test_defaults_are_filled() -> None:
    filled = ProfileRequest(window_seconds=5, activities=("gpu", "gpu")).validated()
    assert filled.window_seconds == 5 and filled.activities == ("gpu",)
    assert filled.max_bytes == DEFAULT_MAX_BYTES
    assert filled.stop_timeout_seconds == DEFAULT_STOP_TIMEOUT_S
    assert ProfileRequest(window_seconds=1).validated().activities == ("cpu", "gpu")


def test_a_window_in_requests_is_bounded_by_the_longest_window() -> None:
    filled = ProfileRequest(window_requests=64).validated()
    assert filled.window_seconds == MAX_WINDOW_S and filled.window_requests == 64


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({}, "window_seconds"),
        ({"window_seconds": MAX_WINDOW_S + 1}, "window_seconds"),
        ({"window_seconds": math.nan}, "window_seconds"),
        ({"window_seconds": -1}, "window_seconds"),
        ({"window_requests": -1}, "window_requests"),
        ({"window_seconds": 1, "activities": ("cpu", "tpu")}, "activities[1]"),
        ({"window_seconds": 1, "max_bytes": -1}, "max_bytes"),
        ({"window_seconds": 1, "stop_timeout_seconds": math.inf}, "stop_timeout_seconds"),
        ({"window_seconds": 1, "stop_url": "ftp://x/stop"}, "stop_url"),
    ],
)
def test_a_bad_field_is_named(fields: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        ProfileRequest(**fields).validated()  # type: ignore[arg-type]
    assert caught.value.field == named
