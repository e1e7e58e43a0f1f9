"""What a launch cost, and what a search spent (issue 44, items 2 and 5).

A launch's *load* is its attempt's STARTING -> READY (the server's start-up: weights read,
kernels compiled, the engine warmed) and its *measuring* READY -> the attempt's end, both read
from the attempt's stored transitions (the events the controller writes as the agent reports
them, so to the poll's resolution). Each is kept with the trial (``details``) as GPU-seconds:
wall seconds times the attempt's GPUs, and wall seconds where no GPU was allocated (the budget
counts a GPU-less host as one GPU). The allocation (``tunelab.analysis.allocation``) weighs a
new launch's load against a block's measuring with them; ``search show`` sums them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.variance import launch_spread, var_to_cv
from tunelab.controller.search.race import Standings
from tunelab.controller.states import AttemptState
from tunelab.controller.store.models import AttemptRow
from tunelab.controller.store.search_models import TrialRow


def phases(attempt: AttemptRow, events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``load_seconds`` and ``measure_seconds`` of one attempt (GPU-seconds), those its
    transitions show: a launch that failed while loading has a load and no measuring."""
    entered: dict[str, float] = {}
    for e in events:
        if e.get("ref") == attempt.id and e.get("to_state") and e.get("at") is not None:
            entered.setdefault(str(e["to_state"]), float(e["at"]))
    gpus = max(1, len(attempt.gpus))
    out: dict[str, float] = {}
    start, ready = entered.get(AttemptState.STARTING.value), entered.get(AttemptState.READY.value)
    end = attempt.finished_at
    if start is not None:
        loaded = ready if ready is not None else end
        if loaded is not None:
            out["load_seconds"] = round(max(0.0, loaded - start) * gpus, 3)
    if ready is not None and end is not None:
        out["measure_seconds"] = round(max(0.0, end - ready) * gpus, 3)
    return out


def launch_cost(
    attempts: Sequence[AttemptRow], events: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """A trial's load and measuring over its attempts (a retried launch loads again)."""
    total: dict[str, float] = {}
    for a in attempts:
        for k, v in phases(a, events).items():
            total[k] = round(total.get(k, 0.0) + v, 3)
    return total


def cost_json(trials: Sequence[TrialRow]) -> dict[str, Any]:
    """``cost`` of ``search show --json``: launches made, and GPU-seconds in all, loading and
    measuring (None where no launch recorded it)."""
    launched = [t for t in trials if t.experiment_id and t.state not in ("RUNNING", "SKIPPED")]

    def total(name: str) -> float | None:
        found = [float(v) for t in launched if isinstance(v := t.details.get(name), int | float)]
        return round(sum(found), 3) if found else None

    return {
        "launches": len(launched),
        "gpu_seconds": total("gpu_seconds"),
        "load_seconds": total("load_seconds"),
        "measure_seconds": total("measure_seconds"),
    }


def noise_json(standing: Standings) -> dict[str, Any]:
    """``noise`` of ``search show --json``: what the race's launches at its load vary by. Until
    launches are measured in blocks (``blocks`` 0) the within part is not separated:
    ``launch_cv`` is the launches' whole spread and ``within_cv`` is None."""
    values = {k: e.values for k, e in standing.entries.items()}
    found = launch_spread(values)
    return {
        "launch_cv": None if found is None else round(var_to_cv(found[0]), 6),
        "within_cv": None,
        "launches": sum(len(v) for v in values.values()),
        "blocks": 0,
    }
