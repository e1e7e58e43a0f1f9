"""``tunelab report WATCH``: the watch's history as one self-contained page."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from tunelab.analysis.metrics import label as metric_label
from tunelab.analysis.report.page import CHECK_SCRIPT, STYLE
from tunelab.analysis.report.svg import PALETTE, nice_ticks
from tunelab.analysis.watch.changes import change_points
from tunelab.analysis.watch.judge import (
    IMPROVEMENT,
    NO_CHANGE,
    REGRESSION,
    UNDECIDED,
    Occurrence,
)
from tunelab.analysis.watch.provenance import arrow, provenance_changes, verdict_line

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
    label = escape(metric_label(metric))
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
            notes.append((occ.index, "; ".join(arrow(c) for c in changes)))
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
