"""From a proposal to a queue entry's spec, and from a finished experiment back to what the search
learns: the objective at the load found, SLO margins, the failure reason, the GPU-seconds used.

A trial's spec is the search document without ``search:``, the proposal's parameters applied as
``matrix:`` applies them, and the benchmark's load set from ``search.load`` (a fixed list, or
``find``: the agent's sweep bisects for the largest load that meets the SLOs on one server); a
launch of the race runs at one fixed load instead (the incumbent's). Successive halving's rung r
multiplies the benchmark's length (requests or duration) by η^r.

**The launch is the unit of evidence**: a trial is one launch (one server start) and gives one
value, the mean of its answer points (the load found and its confirming repeat are points of
one launch, never independent repeats).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tunelab.analysis.metrics import lookup
from tunelab.bench.promptlengths import lengths_exact, server_mean_prompt_tokens
from tunelab.controller.search import hostclass
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.spec.errors import SpecIssue
from tunelab.controller.spec.expand import change_label, split_path
from tunelab.controller.spec.render import run_spec_issue
from tunelab.controller.spec.schema import check_experiment
from tunelab.controller.states import AttemptState, ExperimentState, TrialState
from tunelab.controller.store.models import AttemptRow, ExperimentRow

FAILED_STATES = {
    AttemptState.FAILED_STARTUP: "FAILED_STARTUP",
    AttemptState.FAILED_BENCHMARK: "FAILED_BENCHMARK",
    AttemptState.TIMED_OUT: "TIMED_OUT",
    AttemptState.LOST: "LOST",
    AttemptState.CANCELLED: "CANCELLED",
}


def trial_label(params: Mapping[str, Any]) -> str:
    return ",".join(change_label(p, v) for p, v in params.items())


def with_field(doc: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``doc`` with one dotted field set: only the mappings on the path are copied (shallow),
    the rest is shared, so setting n fields costs n path lengths, not n deep copies."""
    out = dict(doc)
    node = out
    parts = split_path(path)
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = {}
        if not isinstance(child, Mapping):
            raise ValueError(f"{part} is not a mapping")
        child = dict(child)
        node[part] = child
        node = child
    node[parts[-1]] = value
    return out


def trial_document(
    base: Mapping[str, Any],
    search: SearchSpec,
    params: Mapping[str, Any],
    rung: int,
    load: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The raw experiment document of one trial; ``load`` (``{"concurrency": 14}`` or
    ``{"rate": 2.0}``) fixes the load instead of the search's own."""
    doc = copy.deepcopy(dict(base))  # once: each change below copies only its own path
    for path, value in params.items():
        doc = with_field(doc, path, value)
    bench = dict(doc.get("benchmark") or {})
    for key in ("concurrency", "rate", "find"):
        bench.pop(key, None)
    spec_load = search.load
    if load:
        ((axis, value),) = load.items()
        if axis == "concurrency":
            bench["concurrency"] = [int(value)]
        else:
            bench["rate"] = float(value)
        if "requests" not in bench and "duration" not in bench:
            # a found load's launch measures as much as the agent's own find points do (5 x
            # the concurrency, 30 s of arrivals at a rate, at least 10): without it the spec
            # check refuses the launch (a fixed load needs requests or a duration)
            per_unit = 5 if axis == "concurrency" else 30
            bench["requests"] = max(10, math.ceil(per_unit * float(value)))
    elif spec_load.find:
        bench["find"] = {
            "axis": spec_load.axis,
            "max": spec_load.maximum,
            "slo": {lookup(k).field: v for k, v in search.slo.items()},
            **({"plateau": spec_load.plateau} if spec_load.plateau else {}),
        }
    elif spec_load.axis == "concurrency":
        bench["concurrency"] = [int(v) for v in spec_load.values]
    else:
        bench["rate"] = spec_load.values[0]
    scale = search.eta**rung
    if scale > 1:
        if isinstance(bench.get("requests"), int):
            bench["requests"] = bench["requests"] * scale
        if isinstance(bench.get("duration"), int | float):
            bench["duration"] = bench["duration"] * scale
    doc["benchmark"] = bench
    doc["repeat"] = 1
    return doc


def trial_spec(
    base: Mapping[str, Any],
    search: SearchSpec,
    params: Mapping[str, Any],
    rung: int,
    load: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[SpecIssue]]:
    """The normalized spec of one trial, checked as the agent will check it."""
    try:
        doc = trial_document(base, search, params, rung, load)
    except ValueError as exc:
        return {}, [SpecIssue("search.space", str(exc))]
    return check_trial(doc)


def check_trial(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[SpecIssue]]:
    """A rendered trial document checked as the agent will check it."""
    spec, issues = check_experiment(doc)
    if not issues:
        problem = run_spec_issue(spec)
        if problem is not None:
            issues.append(problem)
    return spec, issues


@dataclass(frozen=True)
class Outcome:
    """What a finished trial taught: ``objective`` None when it failed or no load met the SLOs."""

    state: TrialState  # DONE, FAILED, CANCELLED
    objective: float | None = None  # this launch's value: the mean of its answer points
    samples: tuple[float, ...] = ()  # the answer points of this one launch
    failure_reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # for display
    # the launch as evidence (the trial's columns, migration 0009)
    load: tuple[str, float] | None = None
    slo_ratios: dict[str, float] = field(default_factory=dict)
    host: str = ""
    gpu_seconds: float | None = None


def _value(point: Mapping[str, Any], name: str, run: Mapping[str, Any]) -> float | None:
    metric = lookup(name)
    source = run if metric.scope == "run" else point
    value = source.get(metric.field)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def margins(search: SearchSpec, point: Mapping[str, Any]) -> dict[str, float | None]:
    """Per SLO, (limit - value) / limit: >= 0 meets it; None: the point lacks the figure."""
    out: dict[str, float | None] = {}
    for name, limit in search.slo.items():
        value = _value(point, name, {})
        out[name] = None if value is None else round((limit - value) / limit, 4)
    return out


def meets(search: SearchSpec, point: Mapping[str, Any]) -> bool:
    return all(m is not None and m >= 0 for m in margins(search, point).values())


def _load_of(point: Mapping[str, Any]) -> dict[str, Any]:
    if point.get("concurrency"):
        return {"concurrency": point["concurrency"]}
    return {"rate": point.get("request_rate")}


# a launch whose load generator ran out of CPU (saturated): its figures measure the client, not
# the server, so it is no evidence. A starved one (kept from the CPU by other processes) is kept
# and said: on a shared machine every launch is, and none would be left to answer with.
CLIENT_LIMITED = {"CLIENT_SATURATED"}


def client_limited(points: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(failure reason, message) when the load generator reported itself saturated or starved
    at one of ``points`` (the bench's self-check, ``client_check``), else None."""
    for p in points:
        if not (p.get("client_saturated") or p.get("client_starved")):
            continue
        check = p.get("client_check")
        reasons = check.get("reasons") if isinstance(check, Mapping) else None
        why = "; ".join(str(r) for r in reasons or []) or str(p.get("client_cause") or "")
        load = ", ".join(f"{k} {v:g}" for k, v in _load_of(p).items() if v is not None)
        state = "saturated" if p.get("client_saturated") else "starved"
        reason = "CLIENT_SATURATED" if p.get("client_saturated") else "CLIENT_STARVED"
        return reason, f"the load generator was {state} at {load}" + (f": {why}" if why else "")
    return None


def gpu_seconds(attempts: Sequence[AttemptRow]) -> float:
    """Wall time of every attempt from dispatch to its end, times its GPUs (at least one)."""
    total = 0.0
    for a in attempts:
        if a.finished_at is not None:
            start = a.dispatched_at or a.created_at
            total += max(0.0, a.finished_at - start) * max(1, len(a.gpus))
    return round(total, 3)


def launch_load(load: Mapping[str, Any] | None) -> tuple[str, float] | None:
    """A load as a comparable key: ("concurrency", 14.0); None when unknown."""
    for axis in ("concurrency", "rate"):
        value = (load or {}).get(axis)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return axis, float(value)
    return None


def outcome(
    search: SearchSpec,
    exp: ExperimentRow,
    attempts: Sequence[AttemptRow],
    fixed_load: bool = False,
) -> Outcome:
    """The outcome of a trial whose experiment is terminal. ``fixed_load``: a launch of the
    race, measured at the load it was given whether or not that point meets the SLOs (its
    margins are kept beside the value). Its evidence typed: the load, each SLO's value over
    its limit, the host and the GPU-seconds the budget counts (a GPU-less host's wall time
    as one GPU's)."""
    found = _outcome(search, exp, attempts, fixed_load)
    used = found.details
    margins_ = used.get("slo_margins") or {}
    seconds = used.get("gpu_seconds")
    return replace(
        found,
        load=launch_load(used.get("load")),
        slo_ratios={k: round(1.0 - float(m), 6) for k, m in margins_.items() if m is not None},
        host=str(used.get("host") or ""),
        gpu_seconds=float(seconds) if isinstance(seconds, int | float) else None,
    )


def _outcome(
    search: SearchSpec,
    exp: ExperimentRow,
    attempts: Sequence[AttemptRow],
    fixed_load: bool = False,
) -> Outcome:
    last = attempts[-1] if attempts else None
    used: dict[str, Any] = {"gpu_seconds": gpu_seconds(attempts), "experiment": exp.id}
    # the budget counts a GPU-less host's wall time as one GPU's; the document shows
    # gpu_seconds only where a GPU was used (issue 37.6)
    used["gpus"] = max((len(a.gpus) for a in attempts), default=0)
    if last is not None:  # where it ran: the host, and its class as the attempt recorded it
        used["host"] = last.host
        used["host_class"] = hostclass.of_attempt(last)
    if exp.state is ExperimentState.CANCELLED:
        return Outcome(TrialState.CANCELLED, failure_reason="CANCELLED", details=used)
    result = (last.result if last else None) or {}
    if exp.state is not ExperimentState.SUCCEEDED or last is None:
        # the attempt's column is the record (migration 5 moved reasons out of result JSON)
        reason = last.failure_reason if last is not None else ""
        if not reason and last is not None:
            reason = FAILED_STATES.get(last.state, last.state.value)
        used["message"] = (last.message if last else "") or exp.message
        return Outcome(TrialState.FAILED, failure_reason=reason or "FAILED", details=used)
    run = (last.gpu_summary or {}) if last else {}
    points = [p for p in result.get("points", []) if isinstance(p, Mapping)]
    # what the server counted of the prompts, and whether the lengths asked were exact
    used["mean_input_tokens"] = server_mean_prompt_tokens(points)
    used["lengths_exact"] = lengths_exact(result)
    found = result.get("load_search")
    if isinstance(found, Mapping):  # load: find — the agent's bisection chose the answer
        answer = [p for p in points if p.get("point_index") in found.get("answer_points", [])]
        feasible = answer if found.get("met") else []
    elif fixed_load:
        feasible = points[:1]
    else:
        feasible = [p for p in points if meets(search, p)]
    scored = [(v, p) for p in feasible if (v := _value(p, search.objective, run)) is not None]
    # the points the trial's value rests on: a load search's answer points, else the one
    # chosen (at a fixed load, the one measured)
    if isinstance(found, Mapping):
        used_points = [p for _, p in scored]
    elif scored:
        best = (max if search.maximize else min)(scored, key=lambda s: s[0])
        used_points = [best[1]]
    else:
        used_points = []
    limited = client_limited(used_points)
    if limited is not None and limited[0] in CLIENT_LIMITED:
        used["message"] = f"{limited[1]}: not evidence"
        return Outcome(TrialState.FAILED, failure_reason=limited[0], details=used)
    if limited is not None:  # starved: kept, and said
        used["client_starved"] = limited[1]
    if not scored:
        closest = points[0] if points else {}
        used["slo_margins"] = margins(search, closest)
        used["load"] = _load_of(closest) if closest else {}
        used["message"] = "no load met the SLOs"
        return Outcome(TrialState.DONE, None, failure_reason="", details=used)
    if isinstance(found, Mapping):
        samples = tuple(v for v, _ in scored)
        best_point = scored[-1][1]
    else:
        best_value, best_point = (max if search.maximize else min)(scored, key=lambda s: s[0])
        samples = (best_value,)
    used["slo_margins"] = margins(search, best_point)
    used["load"] = _load_of(best_point)
    used["point_index"] = best_point.get("point_index")  # its blocks are cut from this point
    if fixed_load and not meets(search, best_point):
        used["message"] = "missed the SLOs at the race's load"
    objective = sum(samples) / len(samples)
    return Outcome(TrialState.DONE, round(objective, 6), samples, details=used)
