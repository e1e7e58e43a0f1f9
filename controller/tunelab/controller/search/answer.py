"""A search's answer as the user reads it: ``best`` of the search document with its race
(``vs_runner_up``, ``tied_with``), the one line ``search show``, the report and ``submit --wait``
print (winner / tie / undecided), and the effect against the default at the winner's load.

Every interval here is over launches (race.py); "launches" counts launches, never points.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.intervals import positive_interval
from tunelab.analysis.judge import Verdict, wording
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
    """``best.vs_runner_up``: the best against the runner-up, as the race judged it (the look
    that separated or tied it, at that look's confidence and launches); ``verdict`` better,
    tie, undecided (or racing while the race runs)."""
    runner, best = st.runner_up, st.best
    if runner is None or best is None:
        return None
    found = race.versus(st, runner)
    if runner.status == race.SEPARATED:
        verdict = race.BETTER
    elif runner.status == race.TIED:
        verdict = race.TIE
    else:
        verdict = race.RACING if st.verdict == race.RACING else race.UNDECIDED
    interval = None if found is None else found.interval
    return {
        "trial": runner.trial,
        "params": ordered(spec, runner.params),
        "change_pct": None if found is None or found.change is None else _pct(found.change),
        "interval": None if interval is None else [_pct(interval[0]), _pct(interval[1])],
        "confidence": None if found is None else round(found.confidence, 6),
        "launches": list(found.launches) if found else [len(best.values), len(runner.values)],
        # of those launches, how many missed an SLO at the race's load (a runner-up shown over
        # them to miss one is separated whatever its throughput: it cannot serve that load)
        "slo_misses": [best.missed, runner.missed],
        "verdict": verdict,
    }


def _versus_text(spec: SearchSpec, st: race.Standings, verb: str) -> str:
    """``trial 3 (...) by +7.1 % [+2.0 %, +12.5 %], 6 and 6 launches``: the comparison as the
    race judged it; whose SLO misses are counted is said by name."""
    runner, best = st.runner_up, st.best
    if runner is None or best is None:
        return ""
    found = race.versus(st, runner)
    n = found.launches if found else (len(best.values), len(runner.values))
    text = f"{verb} trial {runner.trial} ({_label(spec, runner.params)})".lstrip()
    if found is not None and found.interval is not None and found.change is not None:
        lo, hi = found.interval
        text += f" by {found.change:+.1%} [{lo:+.1%}, {hi:+.1%}]"
    text += f", {n[0]} and {n[1]} launches"
    if runner.missed:
        text += (
            f"; trial {runner.trial} missed the SLOs there in {runner.missed} of "
            f"{len(runner.values)}"
        )
    return text


def answer_line(spec: SearchSpec, st: race.Standings, cancelled: bool = False) -> str:
    """One line: winner, tie or undecided (racing while the race runs; a cancelled search says
    it was cancelled, and where its race stood)."""
    best = st.best
    if best is None:
        return (
            "cancelled: no configuration met the SLOs"
            if cancelled
            else ("no configuration met the SLOs")
        )
    if cancelled and st.verdict == race.RACING:
        return (
            f"cancelled before the race was decided: {head(spec, best)} led "
            f"{_versus_text(spec, st, '')}; undecided"
        )
    line = _line(spec, st, best)
    return f"cancelled: {line}" if cancelled else line


def head(spec: SearchSpec, best: race.Entry) -> str:
    return f"trial {best.trial} ({_label(spec, best.params)})"


def _line(spec: SearchSpec, st: race.Standings, best: race.Entry) -> str:
    at = f"at {load_text(st.load)}"
    runner = st.runner_up
    if st.verdict == race.BETTER and runner is not None:
        if runner.judgement is not None and runner.judgement.verdict is Verdict.BETTER:
            return f"winner: {head(spec, best)} is better than {_versus_text(spec, st, '')} {at}"
        return (
            f"winner: {head(spec, best)}; trial {runner.trial} ({_label(spec, runner.params)}) "
            f"cannot serve the load: it missed the SLOs there in {runner.missed} of "
            f"{len(runner.values)} launches {at}"
        )
    if st.verdict == race.TIE:
        tied = ", ".join(f"trial {e.trial} ({_label(spec, e.params)})" for e in st.tied_with)
        return (
            f"tie: {head(spec, best)} and {tied} lie within ±{spec.margin:.0%} of each other {at} "
            f"({_versus_text(spec, st, 'vs')}): either serves"
        )
    if st.verdict == race.ALONE:
        n = len(best.values)
        return (
            f"only candidate: {head(spec, best)} is the one configuration near the top that met "
            f"the SLOs ({n} launch{'es' if n != 1 else ''} {at})"
        )
    if st.verdict == race.RACING:
        return f"racing (round {st.rounds}): {head(spec, best)} leads {_versus_text(spec, st, '')}"
    budget = f"confirm: {spec.confirm_launches}"
    if st.needed and st.needed > MAX_CONFIRM:  # a hint no spec could follow is no next step
        decide = (
            f"deciding would take about {st.needed} launches each at the spread seen (this "
            f"search had {budget}; a spec may ask for at most {MAX_CONFIRM}); a quieter host "
            "(tunelab audit) narrows the spread"
        )
    elif st.needed:
        decide = (
            f"submit again with search.budget.confirm: {st.needed} to decide (about that many "
            f"launches each, at the spread seen; this search had {budget})"
        )
    else:
        decide = f"submit again with a larger search.budget.confirm to decide (it had {budget})"
    return f"undecided: {head(spec, best)} leads {_versus_text(spec, st, '')} {at}; {decide}"


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


def effect(spec: SearchSpec, st: race.Standings, trials: Sequence[TrialRow]) -> dict[str, Any]:
    """The best configuration against the space's first point, both launched afresh at the
    best's load once the race was decided (``EFFECT_LAUNCHES`` each, interleaved): the launches
    that chose the winner are selected high and are not reused (docs/search.md). Judged alone at
    95 % by the one judge; beside it the load the default itself took under the SLOs."""
    default_key = key(spec.default_params)
    out: dict[str, Any] = {
        "against": ordered(spec, spec.default_params),
        "metric": spec.objective,
        "load": load_json(st.load),
        "launches_from": "fresh launches of the best and the default after the race",
    }
    own = [
        t
        for t in trials
        if key(t.params) == default_key and not race.is_fixed_load(t) and t.state == "DONE"
    ]
    met = [t for t in own if t.objective is not None]
    load = met[-1].load if met else None
    out["default_load"] = None if load is None else load_json({load[0]: load[1]})
    best = st.best
    if best is None:
        return {**out, "verdict": "no configuration met the SLOs"}
    if best.key == default_key:
        return {**out, "verdict": "the default is the best configuration found"}
    if not own:
        return {**out, "verdict": "the default failed: no effect to give"}
    found = st.effect
    fresh = st.state.effect if st.state else {}
    mine, theirs = fresh.get(best.key, ()), fresh.get(default_key, ())
    if found is None or found.interval is None or found.change is None:
        n, m = len(mine), len(theirs)
        return {
            **out,
            "verdict": f"not enough launches ({n} and {m}): two each give an interval",
            "launches": [n, m],
        }
    verdict = wording(found.verdict, "answer")
    if found.verdict is Verdict.UNDECIDED:
        verdict = f"undecided over {len(mine)} and {len(theirs)} launches"
    return {
        **out,
        "default_objective": round(statistics.fmean(theirs), 6),
        "relative_change": round(found.change, 6),
        "interval": [round(found.interval[0], 6), round(found.interval[1], 6)],
        "verdict": verdict,
        "launches": [len(mine), len(theirs)],
    }


def drift_json(spec: SearchSpec, trials: Sequence[TrialRow]) -> dict[str, Any] | None:
    """``drift``: the default at the search's end against its start, over launches at one
    load; None when no drift launch was made."""
    found = drift.judge(spec, trials)
    if found is None:
        return None
    j = found.judgement
    return {
        "start": found.start,
        "end": found.end,
        "load": load_json(found.load),
        "change_pct": None if j.change is None else _pct(j.change),
        "interval": None if j.interval is None else [_pct(j.interval[0]), _pct(j.interval[1])],
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
