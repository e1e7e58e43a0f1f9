"""Unit: duration parsing used by flags, config files and experiment specs."""

from __future__ import annotations

import pytest

from tunelab.common.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("20m", 1200.0), ("1h30m", 5400.0), ("250ms", 0.25), (5, 5.0)],
)
def test_parse(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5", "1h 30m", "m5"])
def test_rejects_with_expected_form(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        parse_duration(text)


def test_format() -> None:
    assert format_duration(0.25) == "0.25s"
    assert format_duration(185) == "3m05s"
    assert format_duration(7260) == "2h01m"
