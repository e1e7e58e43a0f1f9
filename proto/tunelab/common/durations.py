"""Durations as people write them: ``90``, ``90s``, ``20m``, ``1h30m``, ``250ms``."""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``text``; a bare number is seconds. Raises ValueError naming what was expected."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not math.isfinite(text):
            raise ValueError(f"expected a finite duration, got {text}")
        if text < 0:
            raise ValueError(f"expected a duration >= 0, got {text}")
        return float(text)
    value = str(text).strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        pos = 0
        seconds = 0.0
        for match in _PART.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(value) or not value:
            raise ValueError(
                f"expected a duration such as 30s, 20m or 1h30m, got {text!r}"
            ) from None
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite duration, got {text!r}")
    if seconds < 0:
        raise ValueError(f"expected a duration >= 0, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Compact human form: 0.25s, 42s, 3m05s, 2h01m."""
    if seconds < 10:
        return f"{seconds:.2f}s".replace(".00s", "s")
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
