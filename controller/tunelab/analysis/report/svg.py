"""Small hand-written SVG charts for the report: lines and points, intervals, bars.

Written out as markup, not drawn by a script, so the report opens offline, in any browser, with
nothing to load or execute; every mark that carries data has class ``datum`` and a ``<title>``
(the browser's tooltip), which is also what the headless-browser test counts.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#f0e442", "#000")
W, H = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 16, 44


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    color: str
    line: bool = True
    dashed: bool = False
    offset_px: float = 0.0  # drawn this far below its true place (a line on top of another)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round-numbered ticks from at or below ``lo`` to the first at or above ``hi``."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * step:
            step *= factor
            break
    ticks = [math.floor(lo / step) * step]
    while ticks[-1] < hi - 1e-9 * step:
        ticks.append(ticks[-1] + step)
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:.3g}"


class _Axes:
    def __init__(self, xs: Sequence[float], ys: Sequence[float], log_x: bool) -> None:
        self.log_x = log_x and all(x > 0 for x in xs)
        tx = [math.log2(x) for x in xs] if self.log_x else list(xs)
        self.x0, self.x1 = (min(tx), max(tx)) if tx else (0.0, 1.0)
        if self.x0 == self.x1:
            self.x0, self.x1 = self.x0 - 1, self.x1 + 1
        self.yticks = nice_ticks(0.0, max(ys) if ys else 1.0)
        self.y0, self.y1 = 0.0, max(self.yticks[-1], 1e-12)

    def px(self, x: float) -> float:
        t = math.log2(x) if self.log_x else x
        return LEFT + (t - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def py(self, y: float) -> float:
        return H - BOTTOM - (y - self.y0) / (self.y1 - self.y0) * (H - TOP - BOTTOM)


def _frame(title: str, body: list[str]) -> str:
    return (
        f'<svg class="chart-svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def xy_chart(
    title: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    log_x: bool = False,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """Lines (or points) per series, with a legend on the right."""
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    ax = _Axes(xs, ys, log_x)
    body: list[str] = []
    for y in ax.yticks:
        body.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{ax.py(y):.1f}" y2="{ax.py(y):.1f}" '
            'stroke="#e5e5e5"/>'
        )
        body.append(
            f'<text x="{LEFT - 6}" y="{ax.py(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>'
        )
    ticks = (
        sorted(set(x_ticks if x_ticks is not None else xs))
        if ax.log_x or x_ticks
        else [t for t in nice_ticks(ax.x0, ax.x1) if ax.x0 <= t <= ax.x1]
    )
    for x in ticks[:12]:
        body.append(
            f'<text x="{ax.px(x):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{_fmt(x)}</text>'
        )
    body.append(
        f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="#333"/>'
    )
    body.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#333"/>')
    middle = (LEFT + W - RIGHT) / 2
    body.append(f'<text x="{middle}" y="{H - 8}" text-anchor="middle">{escape(x_label)}</text>')
    body.append(
        f'<text transform="translate(14 {(TOP + H - BOTTOM) / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    ly = TOP + 14
    for s in series:
        pts = sorted(s.points) if s.line else list(s.points)
        dy = s.offset_px
        if s.line and len(pts) > 1:
            path = " ".join(f"{ax.px(x):.1f},{ax.py(y) + dy:.1f}" for x, y in pts)
            dash = ' stroke-dasharray="6 4"' if s.dashed else ""
            body.append(
                f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>'
            )
        for x, y in pts:
            tip = escape(f"{s.name}: {_fmt(x)} {x_label}, {_fmt(y)} {y_label}")
            body.append(
                f'<circle class="datum" cx="{ax.px(x):.1f}" cy="{ax.py(y) + dy:.1f}" r="4" '
                f'fill="{s.color}"><title>{tip}</title></circle>'
            )
        if s.dashed:
            body.append(
                f'<line x1="{W - RIGHT + 8}" x2="{W - RIGHT + 24}" y1="{ly - 4}" y2="{ly - 4}" '
                f'stroke="{s.color}" stroke-width="2" stroke-dasharray="4 3"/>'
            )
        else:
            body.append(
                f'<rect x="{W - RIGHT + 12}" y="{ly - 9}" width="10" height="10" fill="{s.color}"/>'
            )
        for j, part in enumerate(_legend_lines(s.name)):
            body.append(f'<text x="{W - RIGHT + 27}" y="{ly + 13 * j}">{escape(part)}</text>')
        ly += 18 + 13 * (len(_legend_lines(s.name)) - 1)
    return _frame(title, body)


LEGEND_CHARS = 19  # what fits right of the plot at the page's 11px


def _legend_lines(name: str) -> list[str]:
    """A legend entry on as many lines as it needs, broken between words: never cut."""
    return textwrap.wrap(name, LEGEND_CHARS, break_on_hyphens=False) or [""]


@dataclass(frozen=True)
class Interval:
    label: str
    estimate: float
    lo: float
    hi: float
    color: str
    note: str = ""
    sets_axis: bool = True  # False: an undecided row, drawn as an arrow when it is off the axis


def axis_bound(rows: Sequence[Interval], band: float) -> float:
    """Half-width of the effects axis: the range where the answers are, not the widest interval.

    Set by the rows that decide (``sets_axis``: better, worse, no meaningful difference): their
    intervals and estimates (x1.25) fit. A row that decides nothing (too few repeats, a +767 %
    interval) is drawn to the edge as an arrow with its numbers printed, so it cannot push the
    real -50 % and +60 % onto zero. With no deciding row, every row sets it. Never under twice
    the minimum effect, never over +-1000 %."""
    deciding = [r for r in rows if r.sets_axis] or list(rows)
    ends = [abs(v) for r in deciding for v in (r.lo, r.hi)]
    bound = max([1.25 * abs(r.estimate) for r in deciding] + ends + [band * 2, 0.01])
    return min(bound * 1.1, 10.0)


def interval_chart(title: str, rows: Sequence[Interval], band: float) -> str:
    """Horizontal intervals of relative change (0 = no change) with the +-band shaded; an end
    beyond the axis (see ``axis_bound``) is an arrow at the edge with its value written."""
    row_h, left, right = 22, 130, 170
    height = TOP + BOTTOM + row_h * max(len(rows), 1)
    bound = axis_bound(rows, band)

    def px(v: float) -> float:
        return left + (max(-bound, min(bound, v)) + bound) / (2 * bound) * (W - left - right)

    bottom = height - BOTTOM
    shade = f'width="{px(band) - px(-band):.1f}" height="{bottom - TOP}" fill="#eee"'
    body = [f'<rect x="{px(-band):.1f}" y="{TOP}" {shade}/>']
    body.append(f'<line x1="{px(0):.1f}" x2="{px(0):.1f}" y1="{TOP}" y2="{bottom}" stroke="#333"/>')
    for tick in nice_ticks(-bound, bound, 6):
        if -bound <= tick <= bound:
            body.append(
                f'<text x="{px(tick):.1f}" y="{height - BOTTOM + 16}" text-anchor="middle">'
                f"{100 * tick:+.0f}%</text>"
            )
    for i, r in enumerate(rows):
        y = TOP + row_h * i + row_h / 2
        tip = escape(
            f"{r.label}: {100 * r.estimate:+.1f}% [{100 * r.lo:+.1f}, {100 * r.hi:+.1f}] {r.note}"
        )
        body.append(
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{escape(r.label[:40])}</text>'
        )
        marks = [
            (
                f'<line x1="{px(r.lo):.1f}" x2="{px(r.hi):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{r.color}" stroke-width="3"/>'
            ),
            f'<circle cx="{px(r.estimate):.1f}" cy="{y:.1f}" r="4.5" fill="{r.color}"/>',
        ]
        clipped = False
        for end, sign in ((r.lo, -1), (r.hi, 1)):
            if sign * end <= bound:
                continue
            clipped = True
            tip_x = px(sign * bound)
            marks.append(
                f'<path class="clipped" d="M{tip_x:.1f},{y:.1f} l{-sign * 8},-5 v10 z" '
                f'fill="{r.color}"/>'
            )
        if clipped:  # the numbers the arrows stand for, in the right margin
            value = f"{100 * r.lo:+.0f}%..{100 * r.hi:+.0f}%"
            if abs(r.estimate) > bound:
                value = f"est {100 * r.estimate:+.0f}%: {value}"
            marks.append(
                f'<text class="clipped-value" x="{W - right + 8}" y="{y + 4:.1f}">{value}</text>'
            )
        body.append(f'<g class="datum"><title>{tip}</title>{"".join(marks)}</g>')
    body.append(
        f'<text x="{(left + W - right) / 2}" y="{height - 8}" text-anchor="middle">'
        f"change against the baseline (95% interval; grey: within the minimum effect)</text>"
    )
    return (
        f'<svg class="chart-svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def bar_chart(title: str, bars: Sequence[tuple[str, float, str]], unit: str) -> str:
    """One horizontal bar per (label, value, color)."""
    row_h, left, right = 22, 250, 90
    height = 2 * TOP + row_h * max(len(bars), 1)
    top = max([v for _, v, _ in bars] + [1e-12])
    body = []
    for i, (label, value, color) in enumerate(bars):
        y = TOP + row_h * i
        width = value / top * (W - left - right)
        body.append(
            f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{escape(label[:40])}</text>'
        )
        body.append(
            f'<rect class="datum" x="{left}" y="{y + 3}" width="{width:.1f}" height="{row_h - 6}" '
            f'fill="{color}"><title>{escape(f"{label}: {_fmt(value)} {unit}")}</title></rect>'
        )
        body.append(
            f'<text x="{left + width + 6:.1f}" y="{y + 15}">{_fmt(value)} {escape(unit)}</text>'
        )
    return (
        f'<svg class="chart-svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
        f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points (throughput, latency) that no other point beats on both: more throughput at no
    more latency. Sorted by throughput."""
    front: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], p[1])):
        if not front or y < front[-1][1]:
            front.append((x, y))
    return sorted(front)
