"""THE reader of a share (a margin, an effect size, a plateau, a CV), in a spec and on the command
line alike: one meaning for a number (docs/judging.md). Here, not in the controller's spec code,
so the CLI reads its flags with it without importing the controller."""

from __future__ import annotations

import math
from typing import Any


def read_fraction(value: Any, below: float, *, zero: bool = False) -> float:
    """THE reader of a share (a margin, an effect size, a plateau, a CV), in a spec and on the
    command line alike: "5%" and 0.05 (or "0.05") are both five percent. A bare number of 1 or
    more is refused with the unit named: it only makes sense as a percentage ("5" would be
    500 %), and reading it as one would give a number two meanings. Above 0 (at least 0 with
    ``zero``) and below ``below``; ValueError says why."""
    text = value.strip() if isinstance(value, str) else ""
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100.0
        elif text:
            share = float(text)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            share = float(value)
        else:
            raise ValueError(value)
    except ValueError:
        raise ValueError(f"expected a percentage such as 5% (or 0.05), got {value!r}") from None
    if not text.endswith("%") and abs(share) >= 1.0:
        raise ValueError(
            f"{value!r} is a fraction of {share:.0%}: write a percentage as 5% or 0.05 "
            "(a bare number is a fraction of 1)"
        )
    above = share >= 0.0 if zero else share > 0.0
    if not (math.isfinite(share) and above and share < below):
        low = "at least 0%" if zero else "above 0%"
        raise ValueError(f"must be {low} and below {below:.0%}, got {value!r}")
    return share
