"""Which change made the difference: effects of each ablation step or matrix factor level over
repeated launches, with an interval and a verdict (docs/report.md, "Effects").

Input is the ``experiments`` list of a compare document (one row per launch); output is the
``effects`` list of ``tunelab compare --json`` plus, for a matrix, its interactions. The same
function serves the controller (the spec's ``compare:`` settings) and the CLI (``--min-effect``,
``--max-cv``, ``--correction``, ``--primary``).

**A comparison is one family of tests** (DESIGN.md, "Answers"). Every row (change x metric x
point) is tested, and the verdicts are corrected together: Benjamini-Hochberg by default (the
false discovery rate across the rows), Holm when asked (the family-wise error). With a declared
primary metric, its rows are the first family, at the full alpha; every other row is a second
family, judged at ``alpha x (primary discoveries / primary rows)`` (nothing found on the primary
metric: nothing else is called better or worse). A matrix's interactions are a family of their
own. "better"/"worse" needs the adjusted p <= alpha and the family's interval on one side of 0;
"no meaningful difference" needs that interval inside +-min_effect. ``ci95`` stays the row's
own 95 % interval; ``interval_adjusted`` is the one verdicts use.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.intervals import (
    ALPHA,
    Cell,
    Estimate,
    Method,
    adjust,
    family_confidence,
    log_contrast,
)
from tunelab.analysis.judge import Judgement, Verdict, judge_pair, wording
from tunelab.analysis.metrics import COMPARED, Metric, lookup
from tunelab.analysis.metrics import label as metric_label

WHOLE_RUN = "all"  # the point of a per-run figure (tokens per joule over the whole sweep)
MIN_REPEATS = 3
BETTER, WORSE = wording(Verdict.BETTER, "compare"), wording(Verdict.WORSE, "compare")
NO_DIFFERENCE = wording(Verdict.TIE, "compare")
NOT_ENOUGH = wording(Verdict.UNDECIDED, "compare")
INTERACTION = wording(Verdict.BETTER, "interaction")
NO_INTERACTION = wording(Verdict.TIE, "interaction")
_REPEAT = re.compile(r"#\d+$")


CORRECTIONS = {"bh": Method.BH, "holm": Method.HOLM}  # spelled so in a spec and on the CLI


@dataclass(frozen=True)
class EffectSettings:
    min_effect: float = 0.02  # an interval inside +-2 % is "no meaningful difference"
    max_cv: float = 0.10  # a cell noisier than this is "not enough repeats"
    correction: Method = Method.BH  # across the comparison's rows; NONE: each row alone
    primary: str | None = None  # a compared metric (metrics.COMPARED) judged first

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_effect": self.min_effect,
            "max_cv": self.max_cv,
            "confidence": 0.95,  # of ci95; interval_adjusted's is in "correction"
            "correction": self.correction.value,
            "primary": self.primary,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EffectSettings:
        """The ``settings`` of a compare document back (an older one holds only the first two)."""
        default = cls()
        return cls(
            min_effect=float(data.get("min_effect", default.min_effect)),
            max_cv=float(data.get("max_cv", default.max_cv)),
            correction=Method(data.get("correction", default.correction.value)),
            primary=data.get("primary"),
        )


@dataclass(frozen=True)
class Variant:
    name: str  # without the "#n" of its launches
    label: str  # the part after "experiment/", e.g. "--itl-ms=5"
    varied: dict[str, str]
    cells: dict[tuple[str, str], Cell]  # (metric, point) -> values over successful launches
    points: tuple[str, ...]


def _finite(value: Any) -> bool:
    """A number to count: an external benchmark's result may hold anything, NaN included."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _variants(rows: Sequence[dict[str, Any]]) -> list[Variant]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[_REPEAT.sub("", row["name"])].append(row)
    out = []
    for name, members in grouped.items():
        values: dict[tuple[str, str], list[float]] = defaultdict(list)
        points: list[str] = []
        for row in members:
            if row["state"] != "SUCCEEDED":
                continue
            for point in row["points"]:
                if point["key"] not in points:
                    points.append(point["key"])
                for metric in COMPARED:
                    if metric.scope == "point" and _finite(point.get(metric.field)):
                        values[(metric.name, point["key"])].append(float(point[metric.field]))
            if _finite(row.get("tokens_per_joule")):
                values[("tokens_per_joule", WHOLE_RUN)].append(float(row["tokens_per_joule"]))
        label = name.split("/", 1)[1] if "/" in name else name
        cells = {key: Cell(tuple(v)) for key, v in values.items()}
        out.append(Variant(name, label, dict(members[0]["varied"]), cells, tuple(points)))
    return out


@dataclass(frozen=True)
class Row:
    """One test of a family: the row of the document and what its verdict is computed from."""

    out: dict[str, Any]
    estimate: Estimate | None
    cells: tuple[Cell, ...]
    metric: Metric
    context: str = "compare"  # how its verdict is worded ("interaction" for an interaction)

    def testable(self) -> bool:
        """Rows under 3 launches on a side have no p and do not count in the family."""
        return self.estimate is not None and all(c.n >= MIN_REPEATS for c in self.cells)

    def noisy(self, settings: EffectSettings) -> bool:
        """A cell noisier than max_cv: the row is tested (it counts in the family) but gets no
        verdict. Dropping it from the family instead would keep exactly the rows whose launches
        happened to agree, whose p values are then too small (the A/A reports at CV 10 % called
        a no-op in 6.2 % of reports that way, against 5 %)."""
        return any(c.cv > settings.max_cv for c in self.cells)


def _row(
    change: str,
    metric: str,
    point: str,
    base: Sequence[Cell],
    variant: Sequence[Cell],
) -> Row:
    """Variant cells against baseline cells, paired in order (one pair per combination of the
    other factors); the estimate is the mean of the pairs' log ratios."""
    k = len(base)
    estimate = log_contrast([(-1.0 / k, c) for c in base] + [(1.0 / k, c) for c in variant])
    interval = estimate.relative_interval() if estimate else None
    n_base, n_variant = sum(c.n for c in base), sum(c.n for c in variant)
    out = {
        "change": change,
        "point": point,
        "metric": metric,
        "baseline_mean": _mean_of_means(base),
        "mean": _mean_of_means(variant),
        "ratio": estimate.ratio if estimate else None,
        "ci95": list(interval) if interval else None,
        "n_baseline": n_base,
        "n_variant": n_variant,
        "launches": [n_base, n_variant],
    }
    return Row(out, estimate, (*base, *variant), lookup(metric))


def judgement(
    row: Row, confidence: float, settings: EffectSettings, discovered: bool | None
) -> Judgement:
    """The row through the one judge (analysis/judge.py), at the family's confidence; a cell
    noisier than max_cv is undecided whatever its interval."""
    noisy = max((c.cv for c in row.cells), default=0.0)
    reason = f"too noisy: CV {noisy:.0%} > {settings.max_cv:.0%}" if row.noisy(settings) else ""
    n = min((c.n for c in row.cells), default=0)
    return judge_pair(
        row.estimate,
        row.metric,
        margin=settings.min_effect,
        confidence=confidence,
        launches=(n, n),
        discovered=discovered,
        reason=reason,
    )


def more_launches(row: Row, confidence: float, settings: EffectSettings) -> int | None:
    """How many more launches of each variant would decide an undecided row at the spread seen
    so far (the judge's ``needed``, at least MIN_REPEATS in all); None when more launches are not
    what it lacks (a cell noisier than max_cv) or nothing can be said."""
    n = min((c.n for c in row.cells), default=0)
    if row.estimate is not None and row.noisy(settings):
        return None
    found = judgement(row, confidence, settings, None).needed
    if found is None:  # decided at this confidence alone, or no estimate: testable first
        return MIN_REPEATS - n if n < MIN_REPEATS else None
    return max(found, MIN_REPEATS) - n


def judge_family(
    rows: Sequence[Row], settings: EffectSettings, name: str, alpha: float = ALPHA
) -> dict[str, Any]:
    """Correct ``rows`` as one family at level ``alpha`` (0: judged, but nothing may be called
    better or worse) and fill in each row's ``p_value``, ``p_adjusted`` (on the scale of the
    full alpha: a discovery is ``p_adjusted <= 0.05``), ``interval_adjusted`` (at the family's
    confidence), ``verdict`` and ``more_launches``; returns the family's summary."""
    tested = [r for r in rows if r.testable()]
    estimates = [r.estimate for r in tested if r.estimate is not None]
    within = adjust([e.p_value() for e in estimates], settings.correction)
    judged = [not r.noisy(settings) for r in tested]
    found = sum(p <= alpha and j for p, j in zip(within, judged, strict=True)) if alpha > 0 else 0
    confidence = family_confidence(settings.correction, len(tested), found, alpha or ALPHA)
    for row in rows:
        estimate = row.estimate
        row.out.update(
            p_value=estimate.p_value() if estimate else None,
            p_adjusted=None,
            interval_adjusted=None,
            interval_confidence=confidence,
            family=name,
            verdict=NOT_ENOUGH,
        )
    for row, estimate, p, judge_it in zip(tested, estimates, within, judged, strict=True):
        p_adjusted = min(1.0, p * ALPHA / alpha) if alpha > 0 else 1.0
        row.out.update(p_adjusted=p_adjusted)
        if judge_it:
            verdict = judgement(row, confidence, settings, p_adjusted <= ALPHA)
            interval = verdict.interval or estimate.relative_interval(confidence)
            row.out.update(
                interval_adjusted=list(interval), verdict=wording(verdict.verdict, row.context)
            )
    for row in rows:
        undecided = row.out["verdict"] == NOT_ENOUGH
        row.out["more_launches"] = more_launches(row, confidence, settings) if undecided else None
    return {
        "name": name,
        "metrics": sorted({r.out["metric"] for r in rows}),
        "family_size": len(tested),
        "rows": len(rows),
        "discoveries": found,
        "alpha": round(alpha, 12),
        "confidence": confidence,
    }


def judge_rows(rows: Sequence[Row], settings: EffectSettings) -> dict[str, Any]:
    """The verdicts of a comparison's effects, corrected as one family, or primary first; the
    ``correction`` summary of ``compare --json``."""
    primary = [r for r in rows if settings.primary and r.out["metric"] == settings.primary]
    if primary:
        first = judge_family(primary, settings, "primary")
        share = first["discoveries"] / first["family_size"] if first["family_size"] else 0.0
        rest = [r for r in rows if r.out["metric"] != settings.primary]
        families = [first, judge_family(rest, settings, "secondary", ALPHA * share)]
    else:
        families = [judge_family(rows, settings, "all")]
    return {
        "method": settings.correction.value,
        "alpha": round(ALPHA, 12),
        "primary": settings.primary if primary else None,
        "family_size": sum(f["family_size"] for f in families),
        "discoveries": sum(f["discoveries"] for f in families),
        "confidence": families[0]["confidence"],
        "families": families,
    }


def _mean_of_means(cells: Sequence[Cell]) -> float | None:
    known = [c.mean for c in cells if c.n]
    return sum(known) / len(known) if known else None


def _keys(variants: Sequence[Variant]) -> list[tuple[str, str]]:
    points: list[str] = []
    for v in variants:
        points += [p for p in v.points if p not in points]
    keys = [(m.name, p) for m in COMPARED if m.scope == "point" for p in points]
    if any(("tokens_per_joule", WHOLE_RUN) in v.cells for v in variants):
        keys.append(("tokens_per_joule", WHOLE_RUN))
    return keys


def _factor_label(path: str, value: str) -> str:
    parts = path.split(".", 2)
    key = parts[2] if len(parts) == 3 and parts[:2] == ["server", "flags"] else path
    return f"{key}={value}"


# --- ablation --------------------------------------------------------------------------------


def ablation_effects(baseline: Variant, changes: Sequence[Variant]) -> list[Row]:
    out = []
    for change in changes:
        for metric, point in _keys([baseline, change]):
            base, var = baseline.cells.get((metric, point)), change.cells.get((metric, point))
            if base is None or var is None:
                continue
            out.append(_row(change.label, metric, point, [base], [var]))
    return out


# --- matrix ----------------------------------------------------------------------------------


def _levels(variants: Sequence[Variant]) -> dict[str, list[str]]:
    """Each factor's levels in submission order; the first is its baseline level."""
    levels: dict[str, list[str]] = {}
    for v in variants:
        for path, value in v.varied.items():
            seen = levels.setdefault(path, [])
            if value not in seen:
                seen.append(value)
    return levels


def matrix_effects(variants: Sequence[Variant]) -> tuple[list[Row], list[Row]]:
    """Main effects (each level against its factor's first level, averaged over the other
    factors' combinations) and every two-factor interaction (a ratio of ratios)."""
    levels = _levels(variants)
    by_levels = {tuple(sorted(v.varied.items())): v for v in variants}

    def cell(assign: dict[str, str], key: tuple[str, str]) -> Cell | None:
        variant = by_levels.get(tuple(sorted(assign.items())))
        return variant.cells.get(key) if variant else None

    def others(skip: Sequence[str]) -> list[dict[str, str]]:
        names = [f for f in levels if f not in skip]
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(levels[f] for f in names))
        ]

    keys = _keys(variants)
    effects: list[Row] = []
    for factor, values in levels.items():
        for level in values[1:]:
            for key in keys:
                pairs = [
                    (cell({**rest, factor: values[0]}, key), cell({**rest, factor: level}, key))
                    for rest in others([factor])
                ]
                known = [(b, v) for b, v in pairs if b is not None and v is not None]
                if known:
                    base, var = [b for b, _ in known], [v for _, v in known]
                    label = _factor_label(factor, level)
                    effects.append(_row(label, key[0], key[1], base, var))
    interactions: list[Row] = []
    for fa, fb in itertools.combinations(levels, 2):
        for a, b in itertools.product(levels[fa][1:], levels[fb][1:]):
            a0, b0 = levels[fa][0], levels[fb][0]
            for key in keys:
                complete: list[list[tuple[float, Cell]]] = []
                for rest in others([fa, fb]):
                    quad = [(1.0, a, b), (-1.0, a0, b), (-1.0, a, b0), (1.0, a0, b0)]
                    found = [(w, cell({**rest, fa: x, fb: y}, key)) for w, x, y in quad]
                    if all(c is not None for _, c in found):
                        complete.append([(w, c) for w, c in found if c is not None])
                # averaged over the complete combinations only: dividing by every combination
                # shrank it when one was missing (a true 1.5 read 1.224)
                terms = [(w / len(complete), c) for quad_ in complete for w, c in quad_]
                if terms:
                    change = f"{_factor_label(fa, a)} x {_factor_label(fb, b)}"
                    interactions.append(_interaction(change, key, terms))
    return effects, interactions


def _interaction(change: str, key: tuple[str, str], terms: list[tuple[float, Cell]]) -> Row:
    estimate: Estimate | None = log_contrast(terms)
    interval = estimate.relative_interval() if estimate else None
    out = {
        "change": change,
        "point": key[1],
        "metric": key[0],
        "ratio": estimate.ratio if estimate else None,  # (ab / a0b) / (ab0 / a0b0)
        "ci95": list(interval) if interval else None,
    }
    return Row(out, estimate, tuple(c for _, c in terms), lookup(key[0]), "interaction")


def largest_interactions(interactions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per metric, the interaction furthest from a ratio of 1."""
    best: dict[str, dict[str, Any]] = {}
    for item in interactions:
        if item["ratio"] is None:
            continue
        size = abs(math.log(item["ratio"]))
        held = best.get(item["metric"])
        if held is None or size > abs(math.log(held["ratio"])):
            best[item["metric"]] = item
    return [best[m.name] for m in COMPARED if m.name in best]


# --- entry point -----------------------------------------------------------------------------


def effects_document(
    rows: Sequence[dict[str, Any]], settings: EffectSettings | None = None
) -> dict[str, Any]:
    """``{"design", "settings", "correction", "effects", "interactions",
    "largest_interactions"}`` for the launches in ``rows``; design is "ablation", "matrix" or
    "none" (nothing to compare). The effects are one family (or primary first); a matrix's
    interactions are a family of their own, summarised in ``correction["interactions"]``."""
    settings = settings or EffectSettings()
    variants = _variants(rows)
    out: dict[str, Any] = {
        "design": "none",
        "settings": settings.to_dict(),
        "effects": [],
        "interactions": [],
        "largest_interactions": [],
    }
    baselines = [v for v in variants if not v.varied]
    factors = {tuple(sorted(v.varied)) for v in variants}
    effects: list[Row] = []
    interactions: list[Row] = []
    if len(baselines) == 1 and len(variants) > 1:
        out["design"] = "ablation"
        effects = ablation_effects(baselines[0], [v for v in variants if v.varied])
    elif not baselines and len(factors) == 1 and len(variants) > 1:
        out["design"] = "matrix"
        effects, interactions = matrix_effects(variants)
    out["correction"] = judge_rows(effects, settings)
    if interactions:
        out["correction"]["interactions"] = judge_family(interactions, settings, "interactions")
    out["effects"] = [r.out for r in effects]
    out["interactions"] = [r.out for r in interactions]
    out["largest_interactions"] = largest_interactions(out["interactions"])
    return out


# --- what is missing -------------------------------------------------------------------------


@dataclass(frozen=True)
class NextLaunches:
    """More launches of each variant that would decide undecided rows at this spread."""

    more: int  # launches of each variant, to submit as `repeat:`: the fewest that decide a row
    decides: int  # undecided rows they would decide
    undecided: int  # rows not decided ("not enough repeats")
    half: int  # launches of each that would decide half of the undecided rows (0: none would)
    commands: tuple[str, ...]  # what supplies them, then the comparison of old and new together

    def sentence(self) -> str:
        text = (
            f"{self.more} more launches of each variant would decide {self.decides} of the "
            f"{self.undecided} undecided rows at this spread"
        )
        if self.half > self.more:
            text += f" ({self.half} more: half of them or more)"
        return text


def next_launches(doc: dict[str, Any]) -> NextLaunches | None:
    """The fewest more launches that decide an undecided row, and the commands that supply them:
    the spec submitted again with that ``repeat`` (a new submission, its names the same), then
    ``compare`` of the spec's latest submission with the groups compared now, whose launches
    count too."""
    undecided = [e for e in doc.get("effects", []) if e.get("verdict") == NOT_ENOUGH]
    needs = sorted(e["more_launches"] for e in undecided if e.get("more_launches"))
    if not needs:
        return None
    more = needs[0]
    names = {_REPEAT.sub("", r["name"]).split("/", 1)[0] for r in doc.get("experiments", [])}
    groups = sorted({str(r["group"]) for r in doc.get("experiments", []) if r.get("group")})
    spec = names.pop() if len(names) == 1 else "SPEC-NAME"
    submit = f"(grep -v '^repeat:' SPEC.yaml; echo 'repeat: {more}') | tunelab submit - --wait"
    compare = f"tunelab compare {spec} {' '.join(groups)}".rstrip()
    middle = (len(undecided) - 1) // 2  # the need at this rank decides half of them or more
    half = needs[middle] if middle < len(needs) else 0
    decides = sum(k <= more for k in needs)
    return NextLaunches(more, decides, len(undecided), half, (submit, compare))


METHOD_NAMES = {
    Method.BH.value: "Benjamini-Hochberg (false discovery rate)",
    Method.HOLM.value: "Holm (family-wise error)",
    Method.NONE.value: "no correction (each row alone)",
}


def describe_correction(correction: dict[str, Any] | None) -> str:
    """One sentence: the family (or families), its correction, what survived, the intervals'
    confidence."""
    if not correction or not correction.get("families"):
        return ""
    method = METHOD_NAMES.get(correction["method"], correction["method"])

    def part(f: dict[str, Any]) -> str:
        return (
            f"{f['discoveries']} of {f['family_size']} survive at {_percent(f['alpha'])}, "
            f"intervals at {_percent(f['confidence'])}"
        )

    families = correction["families"]
    if len(families) == 1:
        text = f"every row tested is one family, {method}: {part(families[0])}"
    else:
        first, rest = families
        text = (
            f"the primary metric {metric_label(correction['primary'])} first, {method}: "
            f"{part(first)}; then the other rows, "
            f"at 5% x the primary's share of discoveries: {part(rest)}"
        )
    inter = correction.get("interactions")
    if inter:
        text += f"; interactions a family of their own: {part(inter)}"
    return text


def _percent(value: float) -> str:
    return f"{100 * value:.4g}%"
