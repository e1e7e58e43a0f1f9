"""``tunelab report GROUP`` for a search: the answer with its evidence, the objective against each
parameter, the Pareto front of throughput against p99 TPOT with the SLO line, and the search's
progress (best so far against trials and GPU-hours), then the trials; the compare document of
the same group supplies every measured point. Same page rules as page.py: nothing external."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from tunelab.analysis.metrics import LATENCIES, lookup
from tunelab.analysis.report.page import CHECK_SCRIPT, STYLE, _figure, _num, _table
from tunelab.analysis.report.svg import PALETTE, Series, bar_chart, pareto_front, xy_chart
from tunelab.analysis.slos import slo_label, slo_text


def _objective_name(search: dict[str, Any]) -> str:
    return str(search["objective"].get("maximize") or search["objective"].get("minimize"))


def _short(path: str) -> str:
    return path.split(".", 2)[2] if path.startswith("server.flags.") else path


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def objective_section(search: dict[str, Any]) -> str:
    name = _objective_name(search)
    scored = [t for t in search["trials"] if t["objective"] is not None]
    if not scored:
        return "<p class='muted'>No trial met the SLOs yet: nothing to plot.</p>"
    figures = []
    for i, param in enumerate(search["space"]):
        path = param["path"]
        values = [t["params"].get(path) for t in scored]
        if _numeric(values):
            xs = [float(v) for v in values]
            log_x = min(xs) > 0 and max(xs) / min(xs) >= 8
            points = [(float(t["params"][path]), float(t["objective"])) for t in scored]
            svg = xy_chart(
                f"{name} vs {_short(path)}",
                [Series("trials", points, PALETTE[i % len(PALETTE)], line=False)],
                _short(path),
                name,
                log_x=log_x,
                x_ticks=sorted(set(xs)) if log_x else None,
            )
        else:
            best: dict[str, float] = {}
            for t in scored:
                key = str(t["params"].get(path))
                best[key] = max(best.get(key, -math.inf), float(t["objective"]))
            bars = [(f"{_short(path)}={k}", v, PALETTE[i % len(PALETTE)]) for k, v in best.items()]
            svg = bar_chart(f"best {name} per {_short(path)}", bars, name)
        figures.append(
            _figure(
                f"objective-{_short(path)}",
                svg,
                f"Each trial that met the SLOs: {name} at the load found, against {path}.",
            )
        )
    return f"<div class='grid'>{''.join(figures)}</div>"


SLO_SPELLING = {m.aliases[0] for m in LATENCIES}  # the search's SLO keys: tpot_p99_ms


def _pareto_chart(compare_doc: dict[str, Any], key: str, limit: float | None) -> str | None:
    """Throughput against one latency, the front and that latency's SLO line; None when no
    point has both figures."""
    name = slo_label(key)
    points = [
        (float(p["output_throughput"]), float(p[lookup(key).field]))
        for row in compare_doc.get("experiments", [])
        for p in row.get("points", [])
        if isinstance(p.get("output_throughput"), int | float)
        and isinstance(p.get(lookup(key).field), int | float)
    ]
    if not points:
        return None
    series = [
        Series("every point", points, "#999", line=False),
        Series("Pareto front", pareto_front(points), PALETTE[1]),
    ]
    if limit:
        xs = [x for x, _ in points]
        series.append(
            Series(
                slo_text({key: limit}), [(min(xs), limit), (max(xs), limit)], PALETTE[2], True, True
            )
        )
    svg = xy_chart(f"throughput vs {name}", series, "output tok/s", f"{name} ms")
    return _figure(f"pareto-{key}", svg, f"Throughput against {name}" + (
        f"; the dashed line is its SLO ({slo_text({key: limit})})." if limit else "."
    ))  # fmt: skip


def pareto_section(search: dict[str, Any], compare_doc: dict[str, Any]) -> str:
    """One chart per SLO of the search (every limit that can bind the load is drawn against
    its own latency); p99 TPOT alone when the search has none."""
    slo = search.get("slo") or {}
    keys = [k for k in slo if k in SLO_SPELLING] or ["tpot_p99_ms"]
    figures = [f for k in keys if (f := _pareto_chart(compare_doc, k, slo.get(k))) is not None]
    if not figures:
        return "<p class='muted'>No measured point yet.</p>"
    note = (
        "<p class='muted'>Every load point of every trial (the ladder and bisection included); "
        "the front holds the points no other beats on both axes.</p>"
    )
    return note + f"<div class='grid'>{''.join(figures)}</div>"


def progress_section(search: dict[str, Any]) -> str:
    name = _objective_name(search)
    maximize = "maximize" in search["objective"]
    best: float | None = None
    by_trial, by_hours = [], []
    hours = 0.0
    for t in sorted(search["trials"], key=lambda t: t["number"]):
        hours += (t.get("gpu_seconds") or 0.0) / 3600.0
        value = t["objective"]
        if value is not None and (best is None or (value > best if maximize else value < best)):
            best = value
        if best is not None and t["state"] != "RUNNING":
            by_trial.append((float(t["number"]), best))
            by_hours.append((hours, best))
    if not by_trial:
        return "<p class='muted'>No trial has met the SLOs yet.</p>"
    first = xy_chart(
        f"best {name} so far", [Series("best so far", by_trial, PALETTE[0])], "trial", name
    )
    figures = [_figure("progress-trials", first, "The best objective after each trial.")]
    if any(t.get("gpu_seconds") for t in search["trials"]):  # none on hosts without GPUs
        second = xy_chart(
            f"best {name} vs GPU-hours",
            [Series("best so far", by_hours, PALETTE[4])],
            "GPU-hours",
            name,
        )
        figures.append(
            _figure(
                "progress-gpu-hours",
                second,
                "The same against the GPU-hours the trials used (attempt wall time x GPUs).",
            )
        )
    return f"<div class='grid'>{''.join(figures)}</div>"


def answer_section(search: dict[str, Any]) -> str:
    best, rec = search.get("best"), search.get("recommendation")
    lines = [f"<p>{escape(search['state'])}: {escape(search['message'])}</p>"]
    if search.get("answer"):
        lines.append(f"<p class='answer'><b>{escape(search['answer'])}</b></p>")
    lines += [f"<p class='warning'>warning: {escape(w)}</p>" for w in search.get("warnings") or []]
    if best:
        interval = best.get("interval")
        params = ", ".join(f"{_short(k)}={v}" for k, v in best["params"].items())
        launches = best.get("launches") or 0
        lines.append(
            f"<p><b>best (trial {best['trial']}):</b> {escape(params)} — "
            f"{escape(_objective_name(search))} {_num(best['objective'])}"
            + (f" [95 % {_num(interval[0])}, {_num(interval[1])}]" if interval else "")
            + f" at {escape(', '.join(f'{k} {v}' for k, v in best['load'].items()))}, "
            f"{launches} launch{'es' if launches != 1 else ''}</p>"
        )
    if rec:
        effect = rec["effect"]
        change = effect.get("relative_change")
        interval = effect.get("interval")
        at = ", ".join(f"{k} {v}" for k, v in (effect.get("load") or {}).items())
        own = ", ".join(f"{k} {v}" for k, v in (effect.get("default_load") or {}).items())
        lines.append(
            f"<p>against the space's first point at {escape(at or 'the same load')}: "
            + (f"{change:+.1%} " if change is not None else "")
            + (f"[95 % {interval[0]:+.1%}, {interval[1]:+.1%}] " if interval else "")
            + (f"over {' and '.join(map(str, effect['launches']))} launches " if interval else "")
            + f"— {escape(effect['verdict'])}"
            + (f" (the default alone takes {escape(own)} under the SLOs)" if own else "")
            + "</p>"
        )
        lines.append(f"<p>server argv: <code>{escape(' '.join(rec['argv']))}</code></p>")
    return "".join(lines)


def trials_section(search: dict[str, Any]) -> str:
    """One column per parameter (its short name above, its value in each row: no cell of
    "name=value" pairs wrapping over lines), then the trial's outcome."""
    paths = [p["path"] for p in search["space"]]
    rows = []
    for t in search["trials"]:
        interval = t.get("interval")
        rows.append(
            [
                str(t["number"]),
                *(escape(str(t["params"].get(path, ""))) for path in paths),
                str(t["rung"])
                + (f" (race {t['race']})" if t.get("race") else "")
                + (f" (drift {t['drift']})" if t.get("drift") else ""),
                escape(", ".join(f"{k} {v}" for k, v in (t.get("load") or {}).items())),
                _num(t["objective"]),
                f"[{_num(interval[0])}, {_num(interval[1])}]" if interval else "",
                str(t.get("launches") or ""),
                escape(t.get("host") or "")
                + (f" ({escape(t['host_class'])})" if t.get("host_class") else ""),
                escape(t["failure_reason"] or t["state"]),
                escape(t.get("message") or ""),
            ]
        )
    header = ["trial", *(_short(p) for p in paths), "rung", "load", _objective_name(search),
              "95 %", "launches", "host", "state", "note"]  # fmt: skip
    return _table(header, rows, text=True, kind="trials")


def render_search_report(search: dict[str, Any], compare_doc: dict[str, Any], title: str) -> str:
    sections = [
        ("The answer", answer_section(search)),
        ("Objective against each parameter", objective_section(search)),
        ("Throughput against each SLO", pareto_section(search, compare_doc)),
        ("Progress", progress_section(search)),
        ("Trials", trials_section(search)),
    ]
    body = "".join(f"<h2>{escape(h)}</h2>{content}" for h, content in sections)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>tunelab search report: {escape(title)}</title><style>{STYLE}</style>"
        f"<script>{CHECK_SCRIPT}</script></head><body>"
        f"<h1>tunelab search report: {escape(title)}</h1>"
        f"<p>{len(search['trials'])} trials; strategy {escape(search['strategy'])}; "
        f"SLO {escape(slo_text(search['slo']))}</p>{body}</body></html>"
    )
