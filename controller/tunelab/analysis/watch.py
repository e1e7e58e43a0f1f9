"""How a watch judges (docs/watch-judging.md): one occurrence against the baseline, the history's
change points, what changed in provenance, and the watch's history page.

Plain data in, plain data out: the watch daemon code hands in occurrences (one value per
successful launch per metric) and stores the JSON-serialisable dicts that come back. The
statistics are :mod:`tunelab.analysis.intervals`'; this module only applies them.

The verdict rule, per metric (the watch's metrics are one family, corrected by Benjamini-Hochberg;
the interval is printed at the family's false-coverage-rate confidence):

* **regression**: the adjusted p <= alpha, the interval lies wholly on the worse side of zero and
  the point estimate is past the margin on that side;
* **improvement**: the same on the better side;
* **no change**: the interval lies wholly inside +-margin;
* **undecided**: anything else (too few launches, or an interval that reaches past the margin
  without excluding zero); ``missing`` says about how many more launches would decide.

The occurrence is a regression if any metric regresses, else an improvement if any improves, else
no change if every metric is no change, else undecided.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

from tunelab.analysis.effects import METRIC_LABELS, METRICS
from tunelab.analysis.intervals import (
    ALPHA,
    Method,
    adjust,
    contrast,
    family_confidence,
    launches_needed,
)
from tunelab.analysis.report.page import CHECK_SCRIPT, STYLE
from tunelab.analysis.report.provenance import provenance_summary
from tunelab.analysis.report.svg import PALETTE, nice_ticks

METRICS_HIGHER_BETTER: dict[str, bool] = METRICS
REGRESSION, IMPROVEMENT, NO_CHANGE, UNDECIDED = (
    "regression",
    "improvement",
    "no change",
    "undecided",
)
PERMUTATIONS = 499  # a permutation p below 0.01 needs at least 99; 499 resolves 0.002
MASK = "(hidden)"
MINUS = "\u2212"  # a typographic minus, as the report prints
_SECRET = re.compile(r"key|token|secret|passw|credential|auth", re.IGNORECASE)


@dataclass(frozen=True)
class Occurrence:
    """One scheduled run of the watch: one value per successful launch per metric."""

    index: int
    started_at: float  # unix seconds
    values: dict[str, tuple[float, ...]]
    provenance: dict[str, Any]


def _pct(x: float) -> float:
    return round(100.0 * x, 2)


def judge_occurrence(
    current: Occurrence, baseline: Occurrence, metrics: Sequence[str], margin: float
) -> dict[str, Any]:
    """``current`` against ``baseline``; ``margin`` is relative (0.05 for 5 %). ``change_pct`` and
    ``interval`` are percentages (-18.0 is 18 % lower)."""
    estimates = [contrast(current.values.get(m, ()), baseline.values.get(m, ())) for m in metrics]
    tested = [i for i, e in enumerate(estimates) if e is not None]
    adjusted = adjust([e.p_value() for e in estimates if e is not None], Method.BH)
    p_adj: dict[int, float] = dict(zip(tested, adjusted, strict=True))
    discoveries = sum(p <= ALPHA for p in adjusted)
    confidence = family_confidence(Method.BH, len(metrics), discoveries)
    rows = []
    for i, metric in enumerate(metrics):
        cur, base = current.values.get(metric, ()), baseline.values.get(metric, ())
        row: dict[str, Any] = {
            "metric": metric,
            "change_pct": None,
            "interval": None,
            "p_adjusted": None,
            "launches": [len(cur), len(base)],
            "verdict": UNDECIDED,
            "missing": "",
        }
        estimate = estimates[i]
        if estimate is None:
            short = max(0, 2 - len(cur))
            row["missing"] = (
                f"{short} more launch{'es' if short != 1 else ''} (at least 2 a side)"
                if short
                else "a baseline with at least 2 launches"
            )
            rows.append(row)
            continue
        lo, hi = estimate.relative_interval(confidence)
        point = estimate.ratio - 1.0
        worse_sign = -1.0 if METRICS_HIGHER_BETTER.get(metric, True) else 1.0
        if -margin <= lo and hi <= margin:
            verdict = NO_CHANGE
        elif p_adj[i] <= ALPHA and (lo > 0 or hi < 0) and abs(point) >= margin:
            verdict = REGRESSION if point * worse_sign > 0 else IMPROVEMENT
        else:
            verdict = UNDECIDED
        if verdict == UNDECIDED:
            need = launches_needed(estimate, min(len(cur), len(base)), margin, confidence)
            if need is not None:
                more = max(1, need - len(cur))
                row["missing"] = f"{more} more launch{'es' if more != 1 else ''} would decide"
        row.update(
            change_pct=_pct(point),
            interval=[_pct(lo), _pct(hi)],
            p_adjusted=p_adj[i],
            verdict=verdict,
        )
        rows.append(row)
    verdicts = [r["verdict"] for r in rows]
    if REGRESSION in verdicts:
        overall = REGRESSION
    elif IMPROVEMENT in verdicts:
        overall = IMPROVEMENT
    elif verdicts and all(v == NO_CHANGE for v in verdicts):
        overall = NO_CHANGE
    else:
        overall = UNDECIDED
    return {
        "verdict": overall,
        "method": str(Method.BH),
        "confidence": confidence,
        "margin_pct": _pct(margin),
        "metrics": rows,
    }


# --- change points ----------------------------------------------------------------------------


def _split_stats(x: np.ndarray, min_size: int) -> np.ndarray:
    """Per row of ``x`` (segments of equal length n), the two-sample statistic
    ``k (n - k) / n * (mean_left - mean_right)^2 / pooled variance`` at each split k."""
    n = x.shape[-1]
    ks = np.arange(min_size, n - min_size + 1)
    c1 = np.cumsum(x, axis=-1)
    c2 = np.cumsum(x * x, axis=-1)
    s1, q1 = c1[..., ks - 1], c2[..., ks - 1]
    s_all, q_all = c1[..., -1:], c2[..., -1:]
    s2, q2 = s_all - s1, q_all - q1
    m1, m2 = s1 / ks, s2 / (n - ks)
    within = (q1 - ks * m1 * m1) + (q2 - (n - ks) * m2 * m2)
    var = np.maximum(within / max(n - 2, 1), 1e-300)
    result: np.ndarray = ks * (n - ks) / n * (m1 - m2) ** 2 / var
    return result


def _best_split(x: np.ndarray, min_size: int, rng: np.random.Generator) -> tuple[int, float] | None:
    n = len(x)
    if n < 2 * min_size or float(np.ptp(x)) == 0.0:
        return None
    observed = _split_stats(x, min_size)
    k = int(np.argmax(observed)) + min_size
    shuffled = np.array([rng.permutation(x) for _ in range(PERMUTATIONS)])
    null_max = _split_stats(shuffled, min_size).max(axis=-1)
    p = (1 + int(np.sum(null_max >= observed.max() - 1e-12))) / (PERMUTATIONS + 1)
    return k, p


def change_points(
    series: Sequence[tuple[float, float]], *, min_size: int = 3, max_false_rate: float = 0.01
) -> list[dict[str, Any]]:
    """Hierarchical binary segmentation with a permutation test per candidate (the E-divisive
    scheme of Matteson and James as Otava runs it, with a mean-shift statistic): split the history
    where the two sides differ most, keep the split when shuffling the segment rarely
    (``p <= max_false_rate``) gives as large a difference, and look again inside both sides.

    ``series`` is (started_at, value) per occurrence in time order; each change point names the
    first occurrence after it."""
    xs = np.asarray([v for _, v in series], dtype=float)
    rng = np.random.default_rng(0)  # deterministic: the same history gives the same marks
    found: dict[int, float] = {}
    stack = [(0, len(xs))]
    while stack:
        start, end = stack.pop()
        best = _best_split(xs[start:end], min_size, rng)
        if best is None or best[1] > max_false_rate:
            continue
        k, p = best
        found[start + k] = p
        stack += [(start, start + k), (start + k, end)]
    bounds = [0, *sorted(found), len(xs)]
    out = []
    for j, at in enumerate(bounds[1:-1], start=1):
        before = float(np.mean(xs[bounds[j - 1] : at]))
        after = float(np.mean(xs[at : bounds[j + 1]]))
        out.append(
            {
                "index": at,
                "at": series[at][0],
                "before_mean": before,
                "after_mean": after,
                "change_pct": _pct(after / before - 1.0) if before else None,
                "p_value": found[at],
            }
        )
    return out


# --- provenance ---------------------------------------------------------------------------------


def _masked(prov: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with values of secret-looking environment variables and flags hidden."""
    doc = dict(prov)
    env = doc.get("env") or {}
    doc["env"] = {k: (MASK if _SECRET.search(str(k)) else v) for k, v in env.items()}
    argv = [str(a) for a in doc.get("argv") or []]
    clean: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, _ = arg.partition("=")
        if eq and flag.startswith("-") and _SECRET.search(flag):
            clean.append(f"{flag}={MASK}")
        elif (
            i
            and argv[i - 1].startswith("-")
            and _SECRET.search(argv[i - 1])
            and "=" not in argv[i - 1]
        ):
            clean.append(MASK)
        else:
            clean.append(arg)
    doc["argv"] = clean
    return doc


def provenance_changes(
    current: Mapping[str, Any], baseline: Mapping[str, Any]
) -> list[dict[str, str]]:
    """What differs between two provenance documents, field by field in the report's reading
    order (``tunelab show``'s labels), never showing a secret."""
    before = provenance_summary(_masked(baseline))
    after = provenance_summary(_masked(current))
    out = []
    for field in list(after) + [f for f in before if f not in after]:
        b, a = before.get(field, "-"), after.get(field, "-")
        if a != b:
            out.append({"field": field, "before": b, "after": a})
    audit_b, audit_a = baseline.get("audit"), current.get("audit")
    if audit_a != audit_b and (audit_a or audit_b):
        out.append({"field": "audit", "before": _text(audit_b), "after": _text(audit_a)})
    return out


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "-"
    return "-" if value is None else str(value)


def _arrow(change: Mapping[str, str]) -> str:
    b, a = change["before"].split(" "), change["after"].split(" ")
    common = 0
    while common < min(len(a), len(b)) - 1 and a[common] == b[common]:
        common += 1
    prefix = " ".join(a[:common])
    return f"{prefix + ' ' if prefix else ''}{' '.join(b[common:])} → {' '.join(a[common:])}"


def _num(value: float) -> str:
    return (
        f"{value:+.0f}".replace("-", MINUS)
        if abs(value) >= 1
        else f"{value:+.1f}".replace("-", MINUS)
    )


def verdict_line(metric_row: Mapping[str, Any], changes: Sequence[Mapping[str, str]]) -> str:
    """``output_throughput -18 % [-21, -15] (regression, 3 vs 3 launches) — changed since the
    baseline: sglang 0.5.2 → 0.5.3``."""
    n_cur, n_base = metric_row["launches"]
    head = str(metric_row["metric"])
    if metric_row.get("change_pct") is not None:
        lo, hi = metric_row["interval"]
        head += f" {_num(metric_row['change_pct'])} % [{_num(lo)}, {_num(hi)}]"
    line = f"{head} ({metric_row['verdict']}, {n_cur} vs {n_base} launches)"
    if metric_row.get("missing"):
        line += f"; {metric_row['missing']}"
    if changes:
        line += " — changed since the baseline: " + "; ".join(_arrow(c) for c in changes)
    return line


# --- history page -------------------------------------------------------------------------------

CW, CH = 720, 280
L, R, T, B = 64, 20, 16, 40
VERDICT_COLORS = {REGRESSION: "#d55e00", IMPROVEMENT: "#009e73", NO_CHANGE: "#888"}


def _history_chart(
    metric: str,
    occurrences: Sequence[Occurrence],
    judgements: Sequence[Mapping[str, Any]],
    baseline: Occurrence,
    marks: Sequence[dict[str, Any]],
    notes: Sequence[tuple[int, str]],
) -> str:
    pts: list[tuple[int, float, float, float, str]] = []
    for occ, judgement in zip(occurrences, judgements, strict=False):
        vals = occ.values.get(metric, ())
        if not vals:
            continue
        mean = statistics.fmean(vals)
        row = next((r for r in judgement.get("metrics", []) if r["metric"] == metric), None)
        verdict = row["verdict"] if row else UNDECIDED
        base_mean = statistics.fmean(baseline.values.get(metric, ()) or (mean,))
        if row and row.get("interval"):
            lo, hi = (base_mean * (1 + v / 100.0) for v in row["interval"])
        else:
            lo = hi = mean
        pts.append((occ.index, mean, lo, hi, verdict))
    base_vals = baseline.values.get(metric, ())
    band = (min(base_vals), max(base_vals)) if base_vals else None
    ys = [y for p in pts for y in p[1:4]] + (list(band) if band else [])
    if not pts:
        return ""
    yt = nice_ticks(min(ys) * 0.98, max(ys) * 1.02)
    y0, y1 = yt[0], yt[-1]
    xs = [p[0] for p in pts]
    x0, x1 = min(xs) - 0.5, max(xs) + 0.5

    def px(x: float) -> float:
        return L + (x - x0) / (x1 - x0) * (CW - L - R)

    def py(y: float) -> float:
        return CH - B - (y - y0) / ((y1 - y0) or 1.0) * (CH - T - B)

    body = []
    for y in yt:
        body.append(
            f'<line x1="{L}" x2="{CW - R}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>'
        )
        body.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:,.4g}</text>')
    if band:
        body.append(
            f'<rect class="baseline" x="{L}" width="{CW - L - R}" y="{py(band[1]):.1f}" '
            f'height="{max(py(band[0]) - py(band[1]), 1):.1f}" fill="#0072b2" opacity="0.12">'
            f"<title>baseline (occurrence {baseline.index}): {band[0]:,.4g} to {band[1]:,.4g}"
            "</title></rect>"
        )
    for mark in marks:
        x = px(mark["index"] - 0.5)
        body.append(
            f'<line class="change-point" x1="{x:.1f}" x2="{x:.1f}" y1="{T}" y2="{CH - B}" '
            f'stroke="{PALETTE[4]}" stroke-width="2" stroke-dasharray="5 3"><title>change point '
            f"before occurrence {mark['index']}: {mark['change_pct']} % (p {mark['p_value']:.3f})"
            "</title></line>"
        )
    for index, text in notes:
        body.append(
            f'<text class="annotation" x="{px(index):.1f}" y="{T + 10}" text-anchor="middle" '
            f'fill="#cc79a7">▼<title>{escape(text)}</title></text>'
        )
    path = " ".join(f"{px(i):.1f},{py(m):.1f}" for i, m, *_ in pts)
    body.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5"/>')
    for i, mean, lo, hi, verdict in pts:
        color = VERDICT_COLORS.get(verdict, PALETTE[4])
        body.append(
            f'<line x1="{px(i):.1f}" x2="{px(i):.1f}" y1="{py(lo):.1f}" y2="{py(hi):.1f}" '
            f'stroke="{color}" stroke-width="2"/>'
        )
        body.append(
            f'<circle class="datum" cx="{px(i):.1f}" cy="{py(mean):.1f}" r="4" fill="{color}">'
            f"<title>occurrence {i}: {mean:,.4g} ({escape(verdict)})</title></circle>"
        )
    for i in sorted(set(xs))[:: max(1, len(xs) // 12)]:
        body.append(f'<text x="{px(i):.1f}" y="{CH - B + 16}" text-anchor="middle">{i}</text>')
    body.append(f'<text x="{(L + CW) / 2}" y="{CH - 6}" text-anchor="middle">occurrence</text>')
    label = escape(METRIC_LABELS.get(metric, metric))
    return (
        f'<svg class="chart-svg" viewBox="0 0 {CW} {CH}" width="{CW}" height="{CH}" role="img" '
        f'aria-label="{label}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def history_page(
    name: str,
    occurrences: Sequence[Occurrence],
    judgements: Sequence[Mapping[str, Any]],
    baseline_index: int,
    metrics: Sequence[str],
) -> str:
    """``tunelab report WATCH``: one self-contained page, a chart per metric over the watch's
    history (each occurrence's mean and adjusted interval, the baseline's band, change points,
    provenance changes as annotations) and a table of verdicts."""
    baseline = next((o for o in occurrences if o.index == baseline_index), occurrences[0])
    notes: list[tuple[int, str]] = []
    for prev, occ in itertools.pairwise(occurrences):
        changes = provenance_changes(occ.provenance, prev.provenance)
        if changes:
            notes.append((occ.index, "; ".join(_arrow(c) for c in changes)))
    sections = []
    for metric in metrics:
        series = [
            (o.started_at, statistics.fmean(o.values[metric]))
            for o in occurrences
            if o.values.get(metric)
        ]
        indices = [o.index for o in occurrences if o.values.get(metric)]
        marks = [{**m, "index": indices[m["index"]]} for m in change_points(series)]
        svg = _history_chart(metric, occurrences, judgements, baseline, marks, notes)
        if not svg:
            continue
        caption = (
            f"{metric}: mean per occurrence with its interval against the baseline (shaded); "
            f"{len(marks)} change point(s) dashed; ▼ where provenance changed"
        )
        sections.append(
            f'<figure class="chart" data-chart="{escape(metric)}">{svg}'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    rows = []
    for occ, judgement in zip(occurrences, judgements, strict=False):
        changes = provenance_changes(occ.provenance, baseline.provenance)
        lines = "<br>".join(escape(verdict_line(r, changes)) for r in judgement.get("metrics", []))
        rows.append(
            f"<tr><td>{occ.index}</td><td>{escape(str(judgement.get('verdict', '-')))}</td>"
            f"<td>{lines}</td></tr>"
        )
    notes_html = "".join(f"<li>before {i}: {escape(t)}</li>" for i, t in notes)
    title = escape(name)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>tunelab watch: {title}</title><style>{STYLE}</style>"
        f"<script>{CHECK_SCRIPT}</script></head><body>"
        f"<h1>tunelab watch: {title}</h1>"
        f"<p>{len(occurrences)} occurrences; baseline: occurrence {baseline.index}</p>"
        f"<h2>History</h2><div class='grid'>{''.join(sections)}</div>"
        f"<h2>Provenance changes</h2><ul>{notes_html or '<li>none</li>'}</ul>"
        "<h2>Verdicts</h2><table class='text'><tr><th>occurrence</th><th>verdict</th>"
        f"<th>metrics</th></tr>{''.join(rows)}</table></body></html>"
    )
