"""vLLM's own key_averages table (``*.profiler_out.txt``, written beside its trace on
``/stop_profile``), read back so a test can hold tunelab's summary against it."""

from __future__ import annotations

UNITS = {"s": 1000.0, "ms": 1.0, "us": 0.001}


def table_rows(text: str) -> dict[str, tuple[float, int]]:
    """name -> (self CPU ms, calls), one entry per row of the table."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) < 7 or not cells[-1].isdigit():
            continue
        value = cells[-5]
        unit = next(u for u in ("ms", "us", "s") if value.endswith(u))
        rows[" ".join(cells[:-6])] = (float(value.removesuffix(unit)) * UNITS[unit], int(cells[-1]))
    return rows
