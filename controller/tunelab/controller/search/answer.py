"""A search's answer as the user reads it: ``best`` of the search document with its race
(``vs_runner_up``, ``tied_with``), the one line ``search show``, the report and ``submit --wait``
print (winner / tie / undecided), and the effect against the default at the winner's load.

Every interval here is over launches (race.py); "launches" counts launches, never points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.intervals import Cell, contrast, positive_interval
from tunelab.controller.search import drift, hostclass, race
from tunelab.controller.search.space import MAX_CONFIRM, SearchSpec
from tunelab.controller.search.strategies import key
from tunelab.controller.search.trials import CLIENT_LIMITED, trial_label
from tunelab.controller.store.search_models import TrialRow


def ordered(spec: SearchSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters in the space's order (the store keeps them sorted by path)."""
    return {p.path: params[p.path] for p in spec.space if p.path in params}


def _label(spec: SearchSpec, params: Mapping[str, Any]) -> str:
    return trial_label(ordered(spec, params))


def load_text(load: Mapping[str, float] | None) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in (load or {}).items()) or "its load"


def load_json(load: Mapping[str, float] | None) -> dict[str, float | int]:
    """``{"concurrency": 64}``: a concurrency as an integer."""
    return {k: int(v) if k == "concurrency" else v for k, v in (load or {}).items()}


def _pct(value: float) -> float:
    return round(value * 100.0, 2)


def vs_runner_up(spec: SearchSpec, st: race.Standings) -> dict[str, Any] | None:
    """``best.vs_runner_up``: the best against the runner-up over their launches at the race's
    load; ``verdict`` better, tie, undecided (or racing while the race runs)."""
    runner = st.runner_up
    if runner is None or st.best is None:
        return None
    found = race.versus(spec, st, runner)
    if runner.status == race.SEPARATED:
        verdict = race.BETTER
    elif runner.status == race.TIED:
        verdict = race.TIE
    else:
        verdict = race.RACING if st.verdict == race.RACING else race.UNDECIDED
    return {
        "trial": runner.trial,
        "params": ordered(spec, runner.params),
        "change_pct": None if found is None else _pct(found.estimate.ratio - 1.0),
        "interval": None if found is None else [_pct(found.interval[0]), _pct(found.interval[1])],
        "confidence": None if found is None else round(found.confidence, 6),
        "launches": [len(st.best.values), len(runner.values)],
        # of those launches, how many missed an SLO at the race's load (a runner-up shown over
        # them to miss one is separated whatever its throughput: it cannot serve that load)
        "slo_misses": [st.best.missed, runner.missed],
        "verdict": verdict,
    }


def _versus_text(spec: SearchSpec, st: race.Standings, verb: str) -> str:
    runner = st.runner_up
    if runner is None or st.best is None:
        return ""
    found = race.versus(spec, st, runner)
    n = f"{len(st.best.values)} and {len(runner.values)} launches"
    if runner.missed:
        n += f"; it missed the SLOs there in {runner.missed} of {len(runner.values)}"
    if found is None:
        return f"{verb} trial {runner.trial} ({_label(spec, runner.params)}), {n}"
    lo, hi = found.interval
    return (
        f"{verb} trial {runner.trial} ({_label(spec, runner.params)}) by "
        f"{found.estimate.ratio - 1.0:+.1%} [{lo:+.1%}, {hi:+.1%}], {n}"
    )


def answer_line(spec: SearchSpec, st: race.Standings) -> str:
    """One line: winner, tie or undecided (racing while the race runs)."""
    best = st.best
    if best is None:
        return "no configuration met the SLOs"
    head = f"trial {best.trial} ({_label(spec, best.params)})"
    at = f"at {load_text(st.load)}"
    if st.verdict == race.BETTER:
        return f"winner: {head} is better than " + _versus_text(spec, st, "")[1:] + f" {at}"
    if st.verdict == race.TIE:
        tied = ", ".join(f"trial {e.trial} ({_label(spec, e.params)})" for e in st.tied_with)
        return (
            f"tie: {head} and {tied} lie within ±{spec.margin:.0%} of each other {at} "
            f"({_versus_text(spec, st, 'vs')}): either serves"
        )
    if st.verdict == race.ALONE:
        n = len(best.values)
        return (
            f"only candidate: {head} is the one configuration near the top that met the SLOs "
            f"({n} launch{'es' if n != 1 else ''} {at})"
        )
    if st.verdict == race.RACING:
        return f"racing (round {st.rounds}): {head} leads " + _versus_text(spec, st, "")[1:]
    if st.needed and st.needed > MAX_CONFIRM:  # a hint no spec could follow is no next step
        decide = (
            f"deciding would take about {st.needed} launches each at the spread seen (confirm "
            f"allows {MAX_CONFIRM}): at this noise either serves; a quieter host (tunelab audit) "
            "narrows the spread"
        )
    elif st.needed:
        decide = (
            f"submit again with search.budget.confirm: {st.needed} to decide (about that many "
            "launches each, at the spread seen)"
        )
    else:
        decide = "submit again with a larger search.budget.confirm to decide"
    versus = _versus_text(spec, st, "")[1:]
    return f"undecided: {head} leads {versus} {at}; {decide}"


def best_json(spec: SearchSpec, st: race.Standings, trials: Sequence[TrialRow]) -> dict[str, Any]:
    """``best``: the race's best configuration, its objective and interval over its launches at
    the race's load, its verdict against the runner-up and the trials it ties with."""
    best = st.best
    if best is None:
        raise ValueError("no best configuration")
    found = positive_interval(best.values) if len(best.values) >= 2 else None
    mean = best.mean
    latest = next((t for t in trials if t.number == (best.launches or [best.trial])[-1]), None)
    return {
        "params": ordered(spec, best.params),
        "objective": None if mean is None else round(mean, 6),
        "interval": None if found is None else [round(found[0], 6), round(found[1], 6)],
        "launches": len(best.values),
        "load": load_json(st.load),
        "trial": best.trial,
        "slo_margins": None if latest is None else latest.details.get("slo_margins"),
        "verdict": st.verdict,
        "vs_runner_up": vs_runner_up(spec, st),
        "tied_with": [e.trial for e in st.tied_with],
    }


def _verdict(spec: SearchSpec, rel: tuple[float, float] | None, n: int, m: int) -> str:
    """The effect's verdict from its 95 % interval over launches."""
    if rel is None:
        return f"not enough launches ({n} and {m}): two each give an interval"
    lo, hi = rel
    if lo > 0:
        return "better" if spec.maximize else "worse"
    if hi < 0:
        return "worse" if spec.maximize else "better"
    if -spec.margin <= lo and hi <= spec.margin:
        return "no meaningful difference"
    return f"undecided over {n} and {m} launches"


def effect(spec: SearchSpec, st: race.Standings, trials: Sequence[TrialRow]) -> dict[str, Any]:
    """The best configuration against the space's first point, both launched at the best's
    load (the race launches the default there), judged as ``compare`` judges a change; beside
    it the load the default itself took under the SLOs (its own trial's)."""
    default_key = key(spec.default_params)
    out: dict[str, Any] = {
        "against": ordered(spec, spec.default_params),
        "metric": spec.objective,
        "load": load_json(st.load),
    }
    own = [
        t
        for t in trials
        if key(t.params) == default_key and not race.is_fixed_load(t) and t.state == "DONE"
    ]
    met = [t for t in own if t.objective is not None]
    out["default_load"] = load_json(met[-1].details.get("load")) if met else None
    best = st.best
    if best is None:
        return {**out, "verdict": "no configuration met the SLOs"}
    if best.key == default_key:
        return {**out, "verdict": "the default is the best configuration found"}
    entry = st.entries.get(default_key)
    if entry is None or not entry.values:
        why = "failed" if not own else "has no launch at the best's load"
        return {**out, "verdict": f"the default {why}: no effect to give"}
    base, chosen = entry.values, best.values
    estimate = contrast(chosen, base)
    rel = estimate.relative_interval() if estimate is not None else None
    cells = (Cell(tuple(chosen)), Cell(tuple(base)))
    mean_base = cells[1].mean
    return {
        **out,
        "default_objective": round(mean_base, 6),
        "relative_change": round(cells[0].mean / mean_base - 1.0, 6) if mean_base > 0 else None,
        "interval": None if rel is None else [round(rel[0], 6), round(rel[1], 6)],
        "verdict": _verdict(spec, rel, len(chosen), len(base)),
        "launches": [len(chosen), len(base)],
    }


def drift_json(spec: SearchSpec, trials: Sequence[TrialRow]) -> dict[str, Any] | None:
    """``drift``: the default at the search's end against its start, over launches at one
    load; None when no drift launch was made."""
    found = drift.judge(spec, trials)
    if found is None:
        return None
    return {
        "start": found.start,
        "end": found.end,
        "load": load_json(found.load),
        "change_pct": None if found.estimate is None else _pct(found.estimate.ratio - 1.0),
        "interval": None
        if found.interval is None
        else [_pct(found.interval[0]), _pct(found.interval[1])],
        "launches": [len(found.start), len(found.end)],
        "verdict": found.verdict,
    }


def excluded(trials: Sequence[TrialRow]) -> list[str]:
    """One line per launch left out because its load generator was short of CPU, and whether
    it was measured again."""
    out = []
    for t in trials:
        if t.failure_reason not in CLIENT_LIMITED:
            continue
        again = next(
            (
                o.number
                for o in trials
                if o.number > t.number
                and key(o.params) == key(t.params)
                and o.rung == t.rung
                and race.is_fixed_load(o) == race.is_fixed_load(t)
            ),
            None,
        )
        then = f"; measured again as trial {again}" if again is not None else ""
        out.append(
            f"trial {t.number} excluded: {t.details.get('message') or t.failure_reason}{then}"
        )
    return out


def starved(trials: Sequence[TrialRow]) -> str:
    """One line naming the launches whose load generator was starved (kept as evidence)."""
    found = [(t.number, str(t.details["client_starved"])) for t in trials
             if t.details.get("client_starved")]  # fmt: skip
    if not found:
        return ""
    numbers = ", ".join(str(n) for n, _ in found)
    return (
        f"trials {numbers}: kept, though the load generator was starved of CPU by other "
        f"processes (the first: {found[0][1]}); their figures may be low"
    )


def warnings(spec: SearchSpec, trials: Sequence[TrialRow]) -> list[str]:
    """What the answer must be read with: a drift of the machine beyond the noise, trials on
    hosts of several classes, launches whose load generator was no evidence or was starved."""
    found = [drift.warning(spec, drift.judge(spec, trials)), hostclass.warning(trials)]
    return [w for w in found if w] + excluded(trials) + [w for w in [starved(trials)] if w]
