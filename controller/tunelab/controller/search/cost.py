"""What a launch cost and measured, and what a search spent (issue 44, items 2 and 5).

A launch's *load* is its attempt's STARTING -> READY (the server's start-up: weights read,
kernels compiled, the engine warmed) and its *measuring* READY -> the attempt's end, both read
from the attempt's stored transitions (the events the controller writes as the agent reports
them, so to the poll's resolution). Each is kept with the trial (``details``) as GPU-seconds:
wall seconds times the attempt's GPUs, and wall seconds where no GPU was allocated (the budget
counts a GPU-less host as one GPU). The allocation (``tunelab.analysis.allocation``) weighs a
new launch's load against a block's measuring with them; ``search show`` sums them.

A launch's *blocks* (:func:`blocks_of`) are its answer point's timeline cut by the one
definition (``tunelab.analysis.timeline.blocks``): the within-launch replicates the variance
components are estimated from (``noise`` in ``search show --json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis import variance
from tunelab.analysis.noise import ProfileKey
from tunelab.analysis.timeline.blocks import blocks
from tunelab.analysis.timeline.model import TimelineError, parse
from tunelab.analysis.variance import Components, launch_spread, var_to_cv
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
    start = entered.get(AttemptState.STARTING.value)
    # READY as the controller saw it, else the benchmark's start (a poll may see STARTING and
    # then BENCHMARKING, READY having come and gone between two polls)
    ready = entered.get(AttemptState.READY.value, entered.get(AttemptState.BENCHMARKING.value))
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

    gpu = [t.gpu_seconds for t in launched if t.gpu_seconds is not None]
    return {
        "launches": len(launched),
        "gpu_seconds": round(sum(gpu), 3) if gpu else None,
        "load_seconds": total("load_seconds"),
        "measure_seconds": total("measure_seconds"),
    }


def blocks_of(timeline: Mapping[str, Any] | None, point_index: Any) -> list[float]:
    """The output throughput of each block of the launch's answer point; empty where it has no
    timeline, the point no whole block, or the document does not parse."""
    if timeline is None or not isinstance(point_index, int):
        return []
    try:
        found = blocks(parse(timeline), point_index)
    except (TimelineError, KeyError, TypeError, ValueError):
        return []
    return [round(b.output_throughput, 4) for b in found if b.output_throughput > 0]


def race_components(standing: Standings, trials: Sequence[TrialRow]) -> Components | None:
    """The variance components of the race's launches at its load, where every one of them was
    measured in two blocks or more and some contender launched twice; else None."""
    by_number = {t.number: t for t in trials}
    launched = [(k, by_number.get(n)) for k, e in standing.entries.items() for n in e.launches]
    measured = [
        variance.Launch(k, tuple(b))
        for k, t in launched
        if t is not None and len(b := t.details.get("blocks") or []) >= 2
    ]
    if not launched or len(measured) != len(launched):
        return None
    c = variance.fit(measured)
    return c if c is not None and c.df_between > 0 else None


def noise_json(standing: Standings, trials: Sequence[TrialRow]) -> dict[str, Any]:
    """``noise`` of ``search show --json``: what the race's launches at its load vary by. Where
    they were measured in blocks (:func:`race_components`), between and within launches; else
    ``launch_cv`` is the launches' whole spread, ``within_cv`` None and ``blocks`` 0."""
    c = race_components(standing, trials)
    if c is not None:
        return {
            "launch_cv": round(c.launch_cv, 6),
            "within_cv": round(c.within_cv, 6),
            "launches": c.launches,
            "blocks": c.blocks,
        }
    entries = standing.entries
    found = launch_spread({k: e.values for k, e in entries.items()})
    return {
        "launch_cv": None if found is None else round(var_to_cv(found[0]), 6),
        "within_cv": None,
        "launches": sum(len(e.launches) for e in entries.values()),
        "blocks": 0,
    }


def profile_key(base: Mapping[str, Any], trials: Sequence[TrialRow]) -> ProfileKey | None:
    """Where a search's noise is remembered: its trials' host class (one class a search), the
    engine the spec names (else its command) and the model its readiness waits for."""
    server = base.get("server") if isinstance(base.get("server"), Mapping) else None
    classes = {str(c) for t in trials if (c := t.details.get("host_class"))}
    if server is None or len(classes) != 1:
        return None
    command = server.get("command") or []
    engine = str(server.get("engine") or (command[-1] if command else ""))
    ready = server.get("ready") if isinstance(server.get("ready"), Mapping) else {}
    model = str(ready.get("model") or "")
    return ProfileKey(classes.pop(), engine, model) if engine and model else None
