"""What ``tunelab search show`` prints: the search's state, its answer (the race's best
configuration with its interval over launches, its verdict against the runner-up, the one-line
answer), every trial, and when done the recommendation (a ready-to-run server argv, the spec
snippet, and its effect against the space's first point at the best's load)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tunelab.analysis.intervals import positive_interval
from tunelab.controller.search import drift, race
from tunelab.controller.search.answer import (
    answer_line,
    best_json,
    drift_json,
    effect,
    ordered,
    warnings,
)
from tunelab.controller.search.cost import cost_json, noise_json
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import key
from tunelab.controller.search.trials import trial_spec
from tunelab.controller.spec.render import server_argv
from tunelab.controller.states import SearchState
from tunelab.controller.store.search_models import SearchRow, TrialRow


def _evidence_group(t: TrialRow) -> str:
    """Launches counted together: the strategy's and the race's; the effect's fresh ones apart
    (they are what the effect rests on); each end of the drift apart."""
    return t.phase if t.phase in ("effect", "drift_start", "drift_end") else "race"


def launches_at(trials: Sequence[TrialRow], t: TrialRow) -> list[float]:
    """The values of ``t``'s configuration's launches at its load and rung, up to ``t``: one
    value per launch."""
    where = t.load
    out = []
    for o in trials:
        if o.number > t.number or key(o.params) != key(t.params) or o.rung != t.rung:
            continue
        if _evidence_group(o) != _evidence_group(t):
            continue
        value = race.launch_value(o)
        if value is not None and o.load == where:
            out.append(value)
    return out


def trial_json(spec: SearchSpec, trials: Sequence[TrialRow], t: TrialRow) -> dict[str, Any]:
    values = launches_at(trials, t) if race.launch_value(t) is not None else []
    found = positive_interval(values) if len(values) >= 2 else None
    return {
        "number": t.number,
        "params": ordered(spec, t.params),
        "rung": t.rung,
        "race": t.race_round or None,
        "phase": t.phase,  # strategy, race, effect (after the race), drift_start, drift_end
        "drift": drift.phase(t) or None,  # a launch of the default at the start or the end
        "host": t.host or None,  # where it ran, and that host's class
        "host_class": t.details.get("host_class"),
        "state": t.state,
        "objective": t.objective,
        "interval": None if found is None else [round(found[0], 6), round(found[1], 6)],
        "launches": len(values),
        "load": t.details.get("load"),
        "slo_margins": t.details.get("slo_margins"),
        "failure_reason": t.failure_reason or None,
        "message": t.details.get("message", ""),
        "experiment": t.experiment_id,
        "gpu_seconds": _gpu_seconds(t),  # None on a host without GPUs
        "mean_input_tokens": t.details.get("mean_input_tokens"),  # the server's count
        "lengths_exact": t.details.get("lengths_exact"),  # False: no tokenizer, words
    }


def _gpu_seconds(t: TrialRow) -> float | None:
    """A trial's GPU-seconds; None where its attempts had no GPU (an older record that did not
    say how many is taken as it was counted)."""
    if t.details.get("gpus", 1) == 0:
        return None
    return t.gpu_seconds


def _total_gpu_seconds(trials: Sequence[TrialRow]) -> float | None:
    used = [v for t in trials if (v := _gpu_seconds(t)) is not None]
    return round(sum(used), 3) if used else None


def recommendation(search: SearchRow, spec: SearchSpec, params: dict[str, Any]) -> dict[str, Any]:
    doc, _ = trial_spec(search.base, spec, params, 0)
    params = ordered(spec, params)
    flags = {p.split(".", 2)[2]: v for p, v in params.items() if p.startswith("server.flags.")}
    others = {p: v for p, v in params.items() if not p.startswith("server.flags.")}
    snippet: dict[str, Any] = {"server": {"flags": flags}} if flags else {}
    for path, value in others.items():
        snippet[path] = value
    return {"argv": server_argv(doc) if doc else [], "spec": snippet}


def search_document(search: SearchRow, trials: Sequence[TrialRow]) -> dict[str, Any]:
    spec = SearchSpec.from_dict(search.spec)
    standing = race.standings(spec, trials)
    doc: dict[str, Any] = {
        "group": search.group,
        "name": search.name,
        "state": search.state,
        "message": search.message,
        "strategy": spec.strategy,
        "objective": {("maximize" if spec.maximize else "minimize"): spec.objective},
        "slo": spec.slo,
        "budget": {
            "trials": spec.max_trials,
            "duration_seconds": spec.max_seconds,
            "confirm_launches": spec.confirm_launches,
            "confirm_gpu_seconds": spec.confirm_seconds,
        },
        "margin": spec.margin,
        "space": [p.to_dict() for p in spec.space],
        "best": None,
        "answer": None,
        "trials": [trial_json(spec, trials, t) for t in trials],
        "drift": drift_json(spec, trials),
        "warnings": warnings(spec, trials),
        "gpu_seconds": _total_gpu_seconds(trials),
        "cost": cost_json(trials),
        "noise": noise_json(standing, trials),
        "submitted_at": search.submitted_at,
        "finished_at": search.finished_at,
    }
    if standing.best is not None:
        doc["best"] = best_json(spec, standing, trials)
        doc["answer"] = answer_line(spec, standing, search.state is SearchState.CANCELLED)
        if search.state is SearchState.DONE:
            doc["recommendation"] = {
                **recommendation(search, spec, standing.best.params),
                "effect": effect(spec, standing, trials),
            }
    return doc
