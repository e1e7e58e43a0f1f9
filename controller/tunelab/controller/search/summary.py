"""What ``tunelab search show`` prints: the search's state, its best configuration with a 95 %
interval, every trial, and when done the recommendation (a ready-to-run server argv, the spec
snippet, and its effect against the space's first point through the effects code)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.effects import EffectSettings, judge
from tunelab.analysis.intervals import Cell, log_contrast
from tunelab.controller.search.driver import best_trial
from tunelab.controller.search.space import SearchSpec
from tunelab.controller.search.strategies import interval, key
from tunelab.controller.search.trials import trial_spec
from tunelab.controller.spec.render import server_argv
from tunelab.controller.states import SearchState
from tunelab.controller.store.search_models import SearchRow, TrialRow


def _samples(trials: Sequence[TrialRow], params: Mapping[str, Any]) -> list[float]:
    return [s for t in trials if key(t.params) == key(dict(params)) for s in t.samples]


def _interval(values: Sequence[float]) -> list[float] | None:
    found = interval(values)
    return None if found is None else [round(found[0], 6), round(found[1], 6)]


def ordered(spec: SearchSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters in the space's order (the store keeps them sorted by path)."""
    return {p.path: params[p.path] for p in spec.space if p.path in params}


def trial_json(spec: SearchSpec, trials: Sequence[TrialRow], t: TrialRow) -> dict[str, Any]:
    own = [s for o in trials if o.number <= t.number and key(o.params) == key(t.params)
           for s in o.samples]  # fmt: skip
    return {
        "number": t.number,
        "params": ordered(spec, t.params),
        "rung": t.rung,
        "state": t.state,
        "objective": t.objective,
        "interval": _interval(own) if t.objective is not None else None,
        "load": t.details.get("load"),
        "slo_margins": t.details.get("slo_margins"),
        "failure_reason": t.failure_reason or None,
        "message": t.details.get("message", ""),
        "experiment": t.experiment_id,
        "gpu_seconds": t.details.get("gpu_seconds"),
        "mean_input_tokens": t.details.get("mean_input_tokens"),  # the server's count
        "lengths_exact": t.details.get("lengths_exact"),  # False: no tokenizer, words
    }


def effect(spec: SearchSpec, trials: Sequence[TrialRow], best: TrialRow) -> dict[str, Any]:
    """The best configuration against the space's first point, as ``compare`` judges a change."""
    default = spec.default_params
    base, chosen = _samples(trials, default), _samples(trials, best.params)
    out: dict[str, Any] = {"against": ordered(spec, default), "metric": spec.objective}
    if key(best.params) == key(default):
        return {**out, "verdict": "the default is the best configuration found"}
    if not base:
        return {**out, "verdict": "the default point met no SLO (or failed): no effect to give"}
    cells = (Cell(tuple(chosen)), Cell(tuple(base)))
    estimate = log_contrast([(1.0, cells[0]), (-1.0, cells[1])])
    rel = estimate.relative_interval() if estimate is not None else None
    return {
        **out,
        "default_objective": round(sum(base) / len(base), 6),
        "relative_change": round(cells[0].mean / cells[1].mean - 1.0, 6)
        if cells[1].mean > 0
        else None,
        "interval": None if rel is None else [round(rel[0], 6), round(rel[1], 6)],
        "verdict": judge(rel, cells, spec.maximize, EffectSettings()),
        "launches": [len(chosen), len(base)],
    }


def recommendation(search: SearchRow, spec: SearchSpec, best: TrialRow) -> dict[str, Any]:
    doc, _ = trial_spec(search.base, spec, best.params, 0)
    params = ordered(spec, best.params)
    flags = {p.split(".", 2)[2]: v for p, v in params.items() if p.startswith("server.flags.")}
    others = {p: v for p, v in params.items() if not p.startswith("server.flags.")}
    snippet: dict[str, Any] = {"server": {"flags": flags}} if flags else {}
    for path, value in others.items():
        snippet[path] = value
    return {"argv": server_argv(doc) if doc else [], "spec": snippet}


def search_document(search: SearchRow, trials: Sequence[TrialRow]) -> dict[str, Any]:
    spec = SearchSpec.from_dict(search.spec)
    best = best_trial(spec, trials)
    doc: dict[str, Any] = {
        "group": search.group,
        "name": search.name,
        "state": search.state,
        "message": search.message,
        "strategy": spec.strategy,
        "objective": {("maximize" if spec.maximize else "minimize"): spec.objective},
        "slo": spec.slo,
        "budget": {"trials": spec.max_trials, "duration_seconds": spec.max_seconds},
        "space": [p.to_dict() for p in spec.space],
        "best": None,
        "trials": [trial_json(spec, trials, t) for t in trials],
        "gpu_seconds": round(sum(t.details.get("gpu_seconds") or 0.0 for t in trials), 3),
        "submitted_at": search.submitted_at,
        "finished_at": search.finished_at,
    }
    if best is not None:
        chosen = _samples(trials, best.params)
        doc["best"] = {
            "params": ordered(spec, best.params),
            "objective": best.objective,
            "interval": _interval(chosen),
            "load": best.details.get("load") or {},
            "trial": best.number,
            "slo_margins": best.details.get("slo_margins"),
        }
        if search.state is SearchState.DONE:
            doc["recommendation"] = {
                **recommendation(search, spec, best),
                "effect": effect(spec, trials, best),
            }
    return doc
