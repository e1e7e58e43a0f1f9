"""``tunelab report``: one self-contained HTML page from a compare document (README, "Report").

No external file, font or script: styles and SVG are inline, and the one script (an error sink
and a check that every chart drew, for the headless-browser test) is inline too.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from html import escape
from typing import Any

from tunelab.analysis.effects import (
    BETTER,
    NO_DIFFERENCE,
    WORSE,
    describe_correction,
    next_launches,
)
from tunelab.analysis.metrics import label as metric_label
from tunelab.analysis.metrics import lookup
from tunelab.analysis.report.provenance import provenance_summary
from tunelab.analysis.report.svg import (
    PALETTE,
    Interval,
    Series,
    bar_chart,
    interval_chart,
    pareto_front,
    xy_chart,
)

_REPEAT = re.compile(r"#\d+$")
# the metrics the summary answers for, in this order (the rest are in the effects tables)
SUMMARY_METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "tokens_per_joule")
OVERLAP = 0.01  # two lines within 1 % of each other at every point are drawn apart
OFFSET_PX = 3.0
VERDICT_COLORS = {BETTER: "#009e73", WORSE: "#d55e00", NO_DIFFERENCE: "#888"}
NOT_ENOUGH_COLOR = "#e69f00"
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;
  padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
td:first-child,th:first-child,td:last-child,th:last-child{text-align:left}
.grid{display:flex;flex-wrap:wrap;gap:12px}figure{margin:8px 0}
figcaption{font-size:13px;color:#555}svg text{font-size:11px;fill:#333}
.warn{background:#fff4e0;padding:6px 10px;border-left:4px solid #e69f00}
.answer{background:#f3f8fc;padding:8px 14px;border-left:4px solid #0072b2}
.answer p{margin:4px 0}
code{font-size:12px;word-break:break-all}.muted{color:#777}
table.text td,table.text th{text-align:left}
table.trials td,table.trials th{white-space:nowrap}
table.trials td:last-child{white-space:normal}
"""
CHECK_SCRIPT = """
window.__reportErrors = [];
window.addEventListener('error', function (e) { window.__reportErrors.push(String(e.message)); });
(function () { var original = console.error; console.error = function () {
  window.__reportErrors.push(Array.prototype.join.call(arguments, ' '));
  original.apply(console, arguments); }; })();
window.addEventListener('load', function () {
  var figures = document.querySelectorAll('figure.chart'), drawn = 0;
  figures.forEach(function (f) {
    var svg = f.querySelector('svg'), box = svg && svg.getBoundingClientRect();
    var ok = !!svg && box.width > 0 && box.height > 0 && svg.querySelectorAll('.datum').length > 0;
    f.setAttribute('data-rendered', ok ? 'yes' : 'no'); if (ok) { drawn += 1; } });
  document.body.setAttribute('data-charts', String(figures.length));
  document.body.setAttribute('data-charts-rendered', String(drawn));
  document.body.setAttribute('data-errors', JSON.stringify(window.__reportErrors));
});
"""


def _variants(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in doc["experiments"]:
        out[_REPEAT.sub("", row["name"])].append(row)
    return dict(out)


def _mean(values: list[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.fmean(known) if known else None


def _point_means(rows: list[dict[str, Any]], field: str) -> dict[int, float]:
    """Concurrency -> mean of ``field`` over the variant's successful launches."""
    values: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        if row["state"] == "SUCCEEDED":
            for point in row["points"]:
                if point.get("concurrency"):
                    values[int(point["concurrency"])].append(point.get(field))
    return {c: m for c, v in sorted(values.items()) if (m := _mean(v)) is not None}


def _figure(name: str, svg: str, caption: str) -> str:
    return (
        f'<figure class="chart" data-chart="{escape(name)}">{svg}'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def _table(header: list[str], rows: list[list[str]], text: bool = False, kind: str = "") -> str:
    """Cells are markup already escaped by the caller; ``text`` aligns every column left;
    ``kind``: one more class (``trials``: cells on one line but the last)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    classes = " ".join(c for c in ("text" if text else "", kind) if c)
    kind = f" class='{classes}'" if classes else ""
    return f"<table{kind}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def _short(name: str) -> str:
    return name.split("/", 1)[1] if "/" in name else name


def _baseline(doc: dict[str, Any], variants: dict[str, list[dict[str, Any]]]) -> str | None:
    """The ablation's baseline variant (the one that varies nothing), if there is one."""
    if doc.get("design") != "ablation":
        return None
    plain = [n for n, rows in variants.items() if all(not r.get("varied") for r in rows)]
    return plain[0] if len(plain) == 1 else None


def _pct(value: float) -> str:
    return f"{round(100 * value, 1) or 0.0:+.1f}%"


def _point(key: str) -> str:
    if key == "all":
        return "over the whole sweep"
    return "at " + {"c": "c=", "r": "rate=", "p": "point "}.get(key[0], key[0]) + key[1:]


def _apart(series: list[Series]) -> tuple[list[Series], list[str]]:
    """Series lying on an earlier one (within OVERLAP at every shared point) are drawn a few
    pixels lower, and said: a baseline must not hide under an identical no-op change."""
    out: list[Series] = []
    notes: list[str] = []
    for s in series:
        twin = next((o for o in out if _overlaps(o, s)), None)
        if twin is None:
            out.append(s)
            continue
        offset = twin.offset_px + OFFSET_PX
        out.append(Series(s.name, s.points, s.color, s.line, s.dashed, offset))
        notes.append(
            f"{s.name} lies on {twin.name} (within {100 * OVERLAP:g}% at every point): "
            f"drawn {offset:g} px lower."
        )
    return out, notes


def _overlaps(a: Series, b: Series) -> bool:
    pa, pb = dict(a.points), dict(b.points)
    shared = pa.keys() & pb.keys()
    return bool(shared) and all(
        abs(pa[x] - pb[x]) <= OVERLAP * max(abs(pa[x]), abs(pb[x]), 1e-12) for x in shared
    )


def curves(doc: dict[str, Any]) -> str:
    variants = _variants(doc)
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(variants)}
    base = _baseline(doc, variants)

    def label(n: str) -> str:
        short = _short(n)
        return short if n != base or "baseline" in short else f"{short} (baseline)"

    throughput, notes = _apart(
        [
            Series(
                label(n),
                list(_point_means(rows, "output_throughput").items()),
                colors[n],
                dashed=n == base,
            )
            for n, rows in variants.items()
        ]
    )
    concurrencies = sorted({c for s in throughput for c, _ in s.points})
    parts = []
    if any(s.points for s in throughput):
        chart = xy_chart(
            "throughput vs concurrency",
            throughput,
            "concurrency",
            "output tok/s",
            log_x=True,
            x_ticks=concurrencies,
        )
        dashed = " The baseline is dashed." if base else ""
        parts.append(
            _figure(
                "throughput",
                chart,
                "Output throughput against concurrency, mean over each variant's launches."
                + dashed
                + "".join(f" {n}" for n in notes),
            )
        )
    latency: list[Series] = []
    for name, rows in variants.items():
        tput, tpot = _point_means(rows, "output_throughput"), _point_means(rows, "median_tpot_ms")
        points = [(tput[c], tpot[c]) for c in tput if c in tpot]
        latency.append(Series(label(name), points, colors[name], line=True, dashed=name == base))
    latency, latency_notes = _apart(latency)
    everything = [p for s in latency for p in s.points]
    if everything:
        front = Series("Pareto front", pareto_front(everything), "#000", dashed=True)
        chart = xy_chart("TPOT vs throughput", [*latency, front], "output tok/s", "TPOT p50 ms")
        parts.append(
            _figure(
                "pareto",
                chart,
                "Median TPOT against output throughput, one point per "
                "concurrency; the black dashed line joins the points no other beats on both."
                + dashed
                + "".join(f" {n}" for n in latency_notes),
            )
        )
    return "".join(parts) or "<p class='muted'>No closed-loop results to plot.</p>"


def _adjusted(e: dict[str, Any]) -> list[float] | None:
    """The interval a verdict rests on (a document from before the correction has only ci95)."""
    found: list[float] | None = e.get("interval_adjusted", e["ci95"])
    return found


def _launches(e: dict[str, Any]) -> str:
    launches = e.get("launches") or [e["n_baseline"], e["n_variant"]]
    return f"{launches[0]}+{launches[1]} launches"


def _effect_line(e: dict[str, Any]) -> str:
    ci, level = _adjusted(e), e.get("interval_confidence", 0.95)
    interval = (
        f"{100 * level:.4g}% interval {_pct(ci[0])} .. {_pct(ci[1])}" if ci else "no interval"
    )
    return (
        f"<b>{escape(e['change'])}</b>: {_pct(e['ratio'] - 1)} {escape(_point(e['point']))} "
        f"({interval}, {_launches(e)}; {escape(e['verdict'])})"
    )


def summary_section(doc: dict[str, Any]) -> str:
    """The answer first, led only by what survives the family's correction: per metric, the
    change that helped most (and the worst, where one made it worse), by how much, its interval
    and launches; then the metrics where nothing survived, the correction, and what more
    launches would decide."""
    effects = [e for e in doc.get("effects", []) if e["ratio"] is not None]
    if not effects:
        return (
            "<div class='answer'><p>No ablation or matrix with a baseline: nothing to compare "
            "against, so no answer to give (the curves below show each variant).</p></div>"
        )
    lines, empty = [], []
    for metric in SUMMARY_METRICS:
        mine = [e for e in effects if e["metric"] == metric]
        if not mine:
            continue
        sign = 1.0 if lookup(metric).higher_is_better else -1.0

        def gain(e: dict[str, Any], sign: float = sign) -> float:
            return sign * (float(e["ratio"]) - 1)

        label = escape(metric_label(metric))
        helped = [e for e in mine if e["verdict"] == BETTER]
        hurt = [e for e in mine if e["verdict"] == WORSE]
        parts = [f"helped most: {_effect_line(max(helped, key=gain))}"] if helped else []
        parts += [f"worst: {_effect_line(min(hurt, key=gain))}"] if hurt else []
        if not parts:
            empty.append(label)
            continue
        line = f"<b>{label}</b>: " + "; ".join(parts)
        lines.append(f"<p class='summary-line' data-metric='{escape(metric)}'>{line}</p>")
    if empty:
        lines.append(
            f"<p class='summary-none'>No change survives the correction on {', '.join(empty)}"
            " (every estimate is in Effects below).</p>"
        )
    settings = doc.get("settings") or {}
    correction = describe_correction(doc.get("correction"))
    note = (
        f"<p class='muted'>Each interval is over launches (the unit of evidence), at the "
        f"confidence of its family; better/worse: the adjusted p is at most 5% and that interval "
        f"excludes 0; no meaningful difference: it lies inside "
        f"±{100 * float(settings.get('min_effect', 0.02)):g}%. "
        f"{escape(correction[:1].upper() + correction[1:])}.</p>"
        if correction
        else ""
    )
    return f"<div class='answer'>{''.join(lines)}{note}{_next_launches(doc)}</div>"


def _next_launches(doc: dict[str, Any]) -> str:
    more = next_launches(doc)
    if more is None:
        return ""
    commands = "<br>".join(f"<code>{escape(c)}</code>" for c in more.commands)
    return (
        f"<p class='next-launches'>{escape(more.sentence())}: submit the spec "
        f"(<code>SPEC.yaml</code>) again with <code>repeat: {more.more}</code>, then compare old "
        f"and new launches together:<br>{commands}</p>"
    )


def _interval_color(verdict: str) -> str:
    return VERDICT_COLORS.get(verdict, NOT_ENOUGH_COLOR)


def effects_section(doc: dict[str, Any]) -> str:
    by_change: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for effect in doc.get("effects", []):
        by_change[effect["change"]].append(effect)
    if not by_change:
        return "<p class='muted'>No ablation or matrix with a baseline: no effects to estimate.</p>"
    band = float((doc.get("settings") or {}).get("min_effect", 0.02))
    parts = []
    for change, effects in by_change.items():
        rows = [
            Interval(
                f"{metric_label(e['metric'])} @ {e['point']}",
                e["ratio"] - 1,
                ci[0],
                ci[1],
                _interval_color(e["verdict"]),
                e["verdict"],
                sets_axis=e["verdict"] in VERDICT_COLORS,
            )
            for e in effects
            # an untested row (too few launches, too noisy) is drawn with its own 95 % interval
            if (ci := _adjusted(e) or e["ci95"]) and e["ratio"] is not None
        ]
        if rows:
            chart = interval_chart(f"effect of {change}", rows, band)
            parts.append(
                _figure(
                    f"effect {change}",
                    chart,
                    f"Effect of {change}, each interval at its family's confidence: green "
                    "better, red worse, grey no meaningful difference, orange not enough repeats.",
                )
            )
        table = [
            [
                escape(metric_label(e["metric"])),
                escape(e["point"]),
                _num(e["baseline_mean"], 2),
                _num(e["mean"], 2),
                f"{100 * (e['ratio'] - 1):+.1f}%" if e["ratio"] is not None else "-",
                _span(_adjusted(e)),
                _level(e),
                _p(e.get("p_adjusted")),
                _launches(e),
                escape(_verdict(e)),
            ]
            for e in effects
        ]
        header = ["metric", "at", "baseline", "variant", "change", "interval", "at conf.",
                  "adjusted p", "launches", "verdict"]  # fmt: skip
        parts.append(f"<h3>{escape(change)}</h3>" + _table(header, table))
    largest = doc.get("largest_interactions") or []
    if largest:
        rows_ = [
            [
                escape(metric_label(i["metric"])),
                escape(i["point"]),
                escape(i["change"]),
                _num(i["ratio"], 3),
                _span(_adjusted(i)),
                _level(i),
                _p(i.get("p_adjusted")),
                escape(_verdict(i)),
            ]
            for i in largest
        ]
        header = ["metric", "at", "factors", "ratio of ratios", "interval", "at conf.",
                  "adjusted p", "verdict"]  # fmt: skip
        parts.append("<h3>Largest interaction per metric</h3>" + _table(header, rows_))
    return "".join(parts)


def _span(ci: list[float] | None) -> str:
    return f"{100 * ci[0]:+.1f}% .. {100 * ci[1]:+.1f}%" if ci else "-"


def _level(e: dict[str, Any]) -> str:
    return f"{100 * e.get('interval_confidence', 0.95):.4g}%"


def _p(value: Any) -> str:
    return f"{value:.2g}" if isinstance(value, int | float) else "-"


def _verdict(e: dict[str, Any]) -> str:
    more = e.get("more_launches")
    return f"{e['verdict']} (+{more} launches each)" if more else str(e["verdict"])


def gpu_section(doc: dict[str, Any]) -> str:
    variants = _variants(doc)
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(variants)}
    measures = (
        ("mean_power_watts", "GPU power", "W", 1.0),
        ("power_share_of_limit", "share of the power limit", "%", 100.0),
        ("sm_clock_mean_hertz", "SM clock", "MHz", 1e-6),
        ("tokens_per_joule", "tokens per joule", "tok/J", 1.0),
    )
    charts = []
    for field, title, unit, scale in measures:
        bars = [
            (_short(n), m * scale, colors[n])
            for n, rows in variants.items()
            if (m := _mean([r.get(field) for r in rows])) is not None
        ]
        if bars:
            charts.append(
                _figure(field, bar_chart(title, bars, unit), f"{title}, mean over launches")
            )
    roof = []
    for name, rows in variants.items():
        measured, floor = _point_means(rows, "median_tpot_ms"), _point_means(rows, "tpot_floor_ms")
        for concurrency, floor_ms in floor.items():
            tpot = measured.get(concurrency)
            share = f"{100 * floor_ms / tpot:.1f}%" if tpot else "-"
            cells = [_short(name), f"c={concurrency}", _num(tpot, 2), _num(floor_ms, 3), share]
            roof.append([escape(c) for c in cells])
    table = (
        _table(["variant", "at", "TPOT p50 ms", "floor ms", "floor / measured"], roof)
        if roof
        else (
            "<p class='muted'>No roofline floor: give <code>roofline.weight_bytes</code> in the "
            "spec, or serve a local model directory with config.json and safetensors.</p>"
        )
    )
    grid = (
        f"<div class='grid'>{''.join(charts)}</div>"
        if charts
        else "<p class='muted'>No GPU figures.</p>"
    )
    return grid + "<h3>Roofline</h3>" + table


def provenance_section(doc: dict[str, Any]) -> str:
    rows = []
    for row in doc["experiments"]:
        summary = provenance_summary(row.get("provenance"))
        if not summary:
            rows.append([escape(row["name"]), "<span class='muted'>not recorded</span>"] + [""] * 7)
            continue
        keys = (
            "engine",
            "model",
            "model config",
            "GPUs",
            "driver / CUDA",
            "at start",
            "tunelab",
            "benchmark",
        )
        cells = [escape(summary[k]) for k in keys]
        details = (
            f"<details><summary>argv, env</summary><code>{escape(summary['argv'])}</code><br>"
            f"<code>{escape(summary['env'])}</code></details>"
        )
        rows.append([escape(row["name"]), *cells[:-1], cells[-1] + details])
    header = [
        "experiment",
        "engine",
        "model",
        "config",
        "GPUs",
        "driver / CUDA",
        "at start",
        "tunelab",
        "benchmark",
    ]
    warnings = "".join(f"<p class='warn'>{escape(w)}</p>" for w in doc.get("warnings", []))
    return warnings + _table(header, rows, text=True)


def failures_section(doc: dict[str, Any]) -> str:
    failed = [r for r in doc["experiments"] if r["state"] != "SUCCEEDED"]
    if not failed:
        return "<p>None: every experiment succeeded.</p>"
    rows = [
        [
            escape(r["name"]),
            escape(r["state"]),
            escape(r["host"] or "-"),
            escape(r.get("message") or ""),
        ]
        for r in failed
    ]
    return _table(["experiment", "state", "host", "reason"], rows, text=True)


def profiles_section(doc: dict[str, Any]) -> str:
    """Each variant's profile against the baseline's: per category and the kernels that changed
    most, in time per output token (or per step / per second when tokens are unknown)."""
    profiles = doc.get("profiles") or {}
    parts = [f"<p class='warn'>{escape(n)}</p>" for n in profiles.get("notes", [])]
    for d in profiles.get("diffs", []):
        a, b = d["repeats"]
        parts.append(
            f"<h3>{escape(_short(d['variant']))} against {escape(_short(d['baseline']))}</h3>"
            f"<p>{escape(d['basis'])} time in {escape(d['unit'])}; {b} variant and {a} baseline "
            f"launch(es); GPU idle {_share(d['gpu_idle_share'][0])} → "
            f"{_share(d['gpu_idle_share'][1])}</p>"
        )
        header = ["", "baseline", "variant", "change", "ratio", "95% interval of change"]
        for title, rows in (("category", d["categories"]), ("kernel", d["kernels"])):
            shown = [r for r in rows if r["a"] or r["b"]]
            body = [
                [
                    escape(r["name"] if title == "category" else f"{r['name']} ({r['category']})"),
                    f"{r['a']:.4f}",
                    f"{r['b']:.4f}",
                    f"{r['delta']:+.4f}",
                    "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
                    "-"
                    if r["interval"] is None
                    else f"{r['interval'][0]:+.4f} .. {r['interval'][1]:+.4f}",
                ]
                for r in shown
            ]
            parts.append(_table([title, *header[1:]], body, text=True))
    return "".join(parts)


def _share(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def timelines(doc: dict[str, Any]) -> str:
    """Each shown attempt's timeline panels (docs/timeline.md), named as its row is."""
    from tunelab.analysis.timeline.panels import timeline_section  # only when there are some

    names = {r.get("attempt"): f"{r['name']} ({r.get('attempt')})" for r in doc["experiments"]}
    return timeline_section(doc["timelines"], lambda a: names.get(a, a))


def render_report(doc: dict[str, Any], title: str) -> str:
    n = len(doc["experiments"])
    design = doc.get("design", "none")
    sections = [
        ("Summary", summary_section(doc)),
        ("Throughput and latency", curves(doc)),
        ("Effects", effects_section(doc)),
        ("GPU power, clocks, energy and the roofline", gpu_section(doc)),
        *([("Profiles", profiles_section(doc))] if doc.get("profiles") else []),
        *([("Timelines", timelines(doc))] if doc.get("timelines") else []),
        ("Provenance", provenance_section(doc)),
        ("Failures", failures_section(doc)),
    ]
    body = "".join(f"<h2>{escape(h)}</h2>{content}" for h, content in sections)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>tunelab report: {escape(title)}</title><style>{STYLE}</style>"
        f"<script>{CHECK_SCRIPT}</script></head><body>"
        f"<h1>tunelab report: {escape(title)}</h1>"
        f"<p>{n} launches; design: {escape(design)}; varied: "
        f"{escape(', '.join(doc.get('varied_fields', [])) or 'nothing')}</p>{body}</body></html>"
    )
