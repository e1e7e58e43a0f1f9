"""The report's timeline: per attempt, aligned panels on one x-axis (seconds from the first
warm-up request) — client, engine, GPU, host — with the load points shaded (warm-up lighter)
and the named events marked; and the attempts' client throughput overlaid on one chart.

Inline SVG in the style of ``report/svg.py`` (no script, opens offline); every mark that
carries data has class ``datum`` and a ``<title>`` tooltip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from tunelab.analysis.report.svg import PALETTE, Series, nice_ticks, xy_chart
from tunelab.analysis.timeline.events import Event, find_events
from tunelab.analysis.timeline.model import Timeline, TimelineError, parse
from tunelab.bench.timeline.document import Value

W, H = 900, 130  # one panel; the panels of an attempt stack, sharing the x-axis
LEFT, RIGHT, TOP, BOTTOM = 64, 170, 20, 36
MAX_MARKS = 600  # polyline vertices per series; more windows are strided
MAX_ATTEMPTS = 12  # timelines drawn in one report


@dataclass(frozen=True)
class Line:
    label: str
    values: Sequence[Value]


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    lines: Sequence[Line]


def _scaled(values: Sequence[Value], factor: float) -> list[Value]:
    return [None if v is None else v * factor for v in values]


def _ratio_of(values: Sequence[Value], cap: Any) -> list[Value]:
    if not isinstance(cap, int | float) or cap <= 0:
        return [None] * len(values)
    return [None if v is None else 100.0 * v / cap for v in values]


def panels(t: Timeline) -> list[Panel]:
    """The panels for one timeline: what was recorded, by source."""
    per_s = 1.0 / t.step
    out = [
        Panel(
            "client",
            "tokens/s",
            [Line("output tokens/s", _scaled(t.get("client.output_tokens"), per_s))],
        ),
        Panel(
            "client and engine",
            "requests",
            [
                Line("in flight (client)", t.get("client.in_flight")),
                Line("running (engine)", t.get("engine.running")),
                Line("waiting (engine)", t.get("engine.waiting")),
                Line("preempted /s", _scaled(t.get("engine.preemptions"), per_s)),
            ],
        ),
    ]
    gpu_lines = [Line("KV cache used", _scaled(t.get("engine.kv_cache_usage"), 100.0))]
    for gpu in t.gpu_indices()[:4]:
        facts = t.gpus[gpu] if gpu < len(t.gpus) else {}
        gpu_lines += [
            Line(f"GPU {gpu} busy", _scaled(t.get(f"gpu{gpu}.utilization_ratio"), 100.0)),
            Line(
                f"GPU {gpu} power of limit",
                _ratio_of(t.get(f"gpu{gpu}.power_watts"), facts.get("power_limit_watts")),
            ),
            Line(
                f"GPU {gpu} SM clock of max",
                _ratio_of(t.get(f"gpu{gpu}.sm_clock_hertz"), facts.get("sm_clock_max_hertz")),
            ),
        ]
    out.append(Panel("engine KV cache and GPUs", "%", gpu_lines))
    out.append(
        Panel(
            "host",
            "% of a CPU",
            [
                Line("all CPUs", _scaled(t.get("host.cpu_ratio"), 100.0)),
                Line("busiest CPU", _scaled(t.get("host.cpu_max_ratio"), 100.0)),
                Line("load generator", _scaled(t.get("host.client_cpu_ratio"), 100.0)),
                Line("steal", _scaled(t.get("host.steal_ratio"), 100.0)),
            ],
        )
    )
    return [
        Panel(p.title, p.unit, [ln for ln in p.lines if any(v is not None for v in ln.values)])
        for p in out
    ]


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:.3g}"


def panel_svg(t: Timeline, panel: Panel, events: Sequence[Event], last: bool) -> str:
    x_max = max(t.windows * t.step, t.step)
    present = [v for ln in panel.lines for v in ln.values if v is not None]
    ticks = nice_ticks(0.0, max(present) if present else 1.0, 3)
    y_top = max(ticks[-1], 1e-12)
    height = H + (BOTTOM if last else 0)
    bottom = H - 8

    def px(x: float) -> float:
        return LEFT + x / x_max * (W - LEFT - RIGHT)

    def py(y: float) -> float:
        return bottom - y / y_top * (bottom - TOP)

    body: list[str] = []
    for span in t.points:  # load points: warm-up lighter, the measured part darker
        body.append(
            f'<rect x="{px(span.start_s):.1f}" y="{TOP}" '
            f'width="{max(0.0, px(span.measure_s) - px(span.start_s)):.1f}" '
            f'height="{bottom - TOP}" fill="#f7f7f7"/>'
            f'<rect x="{px(span.measure_s):.1f}" y="{TOP}" '
            f'width="{max(0.0, px(span.end_s) - px(span.measure_s)):.1f}" '
            f'height="{bottom - TOP}" fill="#eef4fa"/>'
        )
    for y in ticks:
        body.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            'stroke="#e5e5e5"/>'
            f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>'
        )
    body.append(
        f'<text transform="translate(12 {(TOP + bottom) / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(panel.unit)}</text>"
    )
    stride = max(1, -(-t.windows // MAX_MARKS))
    for i, line in enumerate(panel.lines):
        color = PALETTE[i % len(PALETTE)]
        pts = [
            (px((w + 0.5) * t.step), py(v))
            for w in range(0, t.windows, stride)
            if (v := line.values[w]) is not None
        ]
        if len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            body.append(
                f'<polyline class="datum" points="{path}" fill="none" stroke="{color}" '
                f'stroke-width="1.5"><title>{escape(panel.title)}: {escape(line.label)}</title>'
                "</polyline>"
            )
        ly = TOP + 10 + 14 * i
        body.append(
            f'<rect x="{W - RIGHT + 10}" y="{ly - 8}" width="10" height="3" fill="{color}"/>'
            f'<text x="{W - RIGHT + 24}" y="{ly - 3}">{escape(line.label)}</text>'
        )
    for event in events:  # the named events: a dashed line at their time
        x = px(event.at_s)
        body.append(
            f'<line class="datum event" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{bottom}" '
            f'stroke="#c00" stroke-dasharray="3 3"><title>{escape(event.kind)} at '
            f"t={event.at_s:.1f} s: {escape(event.evidence)}</title></line>"
        )
    body.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{bottom}" y2="{bottom}" stroke="#333"/>')
    body.append(f'<text x="{LEFT}" y="{TOP - 6}" font-weight="bold">{escape(panel.title)}</text>')
    if last:
        for x in nice_ticks(0.0, x_max, 8):
            if x <= x_max:
                body.append(
                    f'<text x="{px(x):.1f}" y="{bottom + 14}" text-anchor="middle">{_fmt(x)}</text>'
                )
        body.append(
            f'<text x="{(LEFT + W - RIGHT) / 2}" y="{bottom + 30}" text-anchor="middle">'
            "s from the benchmark's start</text>"
        )
    return (
        f'<svg class="chart-svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
        f'role="img" aria-label="{escape(panel.title)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def attempt_figure(label: str, t: Timeline) -> str:
    """One attempt's stacked panels and its event list."""
    events = find_events(t)
    shown = [p for p in panels(t) if p.lines]
    svgs = "".join(panel_svg(t, p, events, last=i == len(shown) - 1) for i, p in enumerate(shown))
    items = "".join(
        f"<li>t={e.at_s:.1f} s <b>{escape(e.kind)}</b>: {escape(e.evidence)}</li>" for e in events
    )
    listing = f"<ul>{items}</ul>" if items else "<p class='muted'>no events</p>"
    step = f"{t.step:g} s windows" + (
        f", downsampled x{t.downsampled}" if t.downsampled > 1 else ""
    )
    return (
        f'<figure class="chart timeline" data-chart="timeline {escape(label)}">{svgs}'
        f"<figcaption>{escape(label)}: {step}; shaded: load points (lighter: warm-up); "
        f"dashed red: events</figcaption></figure>{listing}"
    )


def overlay(timelines: Mapping[str, Timeline]) -> str:
    """The attempts' output throughput on one axis (s from each one's start)."""
    series = []
    for i, (label, t) in enumerate(timelines.items()):
        tokens = t.get("client.output_tokens")
        stride = max(1, -(-t.windows // MAX_MARKS))
        pts = [
            ((w + 0.5) * t.step, v / t.step)
            for w in range(0, t.windows, stride)
            if (v := tokens[w]) is not None
        ]
        if pts:
            series.append(Series(label, pts, PALETTE[i % len(PALETTE)]))
    if len(series) < 2:
        return ""
    return xy_chart("output throughput over time", series, "s", "tokens/s")


def timeline_section(
    documents: Mapping[str, Mapping[str, Any]], label: Callable[[str], str] = str
) -> str:
    """The report's "Timelines" section from attempt id -> timeline document."""
    parsed: dict[str, Timeline] = {}
    notes = []
    for attempt, doc in list(documents.items())[:MAX_ATTEMPTS]:
        try:
            parsed[label(attempt)] = parse(doc)
        except TimelineError as exc:
            notes.append(
                f"<p class='warn'>{escape(attempt)}: timeline not read ({escape(str(exc))})</p>"
            )
    if len(documents) > MAX_ATTEMPTS:
        notes.append(f"<p class='muted'>the first {MAX_ATTEMPTS} of {len(documents)} attempts</p>")
    if not parsed:
        return "".join(notes) or "<p class='muted'>no timelines recorded</p>"
    overlaid = overlay(parsed)
    parts = [
        f'<figure class="chart" data-chart="timeline overlay">{overlaid}'
        "<figcaption>the attempts' output throughput, overlaid</figcaption></figure>"
        if overlaid
        else ""
    ]
    parts += [attempt_figure(name, t) for name, t in parsed.items()]
    return "".join(notes + parts)
