"""A search's SLOs as a person reads them: ``{"tpot_p99_ms": 25}`` is ``p99 TPOT ≤ 25 ms``.
One place, so ``search show``, the search's messages, the report and the MLflow export say
them alike (issue 37.6)."""

from __future__ import annotations

from collections.abc import Mapping

# the search's SLO keys (the latency metrics of tunelab.analysis.metrics): metric, statistic
_STATISTIC = {"p99": "p99", "median": "median"}


def slo_label(key: str) -> str:
    """``tpot_p99_ms`` -> ``p99 TPOT``; a key of another shape is given as it is."""
    parts = key.split("_")
    if len(parts) == 3 and parts[1] in _STATISTIC and parts[2] == "ms":
        return f"{_STATISTIC[parts[1]]} {parts[0].upper()}"
    return key


def slo_text(slo: Mapping[str, float]) -> str:
    """``p99 TPOT ≤ 25 ms, p99 TTFT ≤ 150 ms``; ``none`` when there is no SLO."""
    return ", ".join(f"{slo_label(k)} ≤ {v:g} ms" for k, v in slo.items()) or "none"
