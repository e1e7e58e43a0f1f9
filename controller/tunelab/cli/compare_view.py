"""Rendering ``tunelab compare``: tables that fit 100 columns (one row per experiment and load
point, then the effects of each change), or CSV with one row per sweep point."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from tunelab.analysis.effects import (
    BETTER,
    MIN_REPEATS,
    NOT_ENOUGH,
    WORSE,
    describe_correction,
    next_launches,
)
from tunelab.analysis.metrics import label as metric_label
from tunelab.bench.promptlengths import prompt_tokens_line

WIDTH = 100
# Names (variants, hosts) are broken only after one of NAME_BREAKS, or, for a part too long for
# its column, after one of PART_BREAKS; only a run longer than the column with neither is folded.
NAME_BREAKS = frozenset(", /")
PART_BREAKS = frozenset("=-_.:")
HOST_MAX = 14
NAME_MIN = 12


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def _pct(value: Any) -> str:
    """``+12.3%``; a change that rounds to nothing reads ``+0.0%``, never ``-0.0%``."""
    return f"{round(100 * value, 1) or 0.0:+.1f}%" if isinstance(value, int | float) else "-"


def point_label(key: str) -> str:
    """``c8`` -> ``c=8``; ``r2.5`` -> ``rate=2.5``; ``all`` -> the whole sweep."""
    if key == "all":
        return "sweep"
    return {"c": "c=", "r": "rate=", "p": "point "}[key[0]] + key[1:]


def _figure(metric: str, value: Any) -> str:
    digits = 1 if metric == "output_throughput" else 3 if metric == "tokens_per_joule" else 2
    return _num(value, digits)


def _console(width: int = WIDTH) -> Console:
    return Console(file=io.StringIO(), width=width, color_system=None)


def _split_after(text: str, seps: frozenset[str]) -> list[str]:
    """``a=1,b=2`` -> ``["a=1,", "b=2"]``: pieces that each end at a separator (kept)."""
    pieces: list[str] = []
    start = 0
    for i, ch in enumerate(text):
        if ch in seps and i + 1 < len(text):
            pieces.append(text[start : i + 1])
            start = i + 1
    pieces.append(text[start:])
    return [p for p in pieces if p]


def _pack(pieces: list[str], width: int) -> list[str]:
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1].rstrip()) + len(piece.rstrip()) <= width:
            lines[-1] += piece
        else:
            lines.append(piece)
    return [line.rstrip() for line in lines]


def name_lines(name: str, width: int) -> list[str]:
    """``name`` as lines of at most ``width``, broken only between its parts: after ``,``, a
    space or ``/``; a part longer than ``width`` also after ``=``, ``-``, ``_``, ``.`` or ``:``;
    only a run longer than ``width`` with none of them is cut. Rich is then handed lines that
    fit its column, so it never folds a word, whatever width the table is given."""
    pieces: list[str] = []
    for part in _split_after(name, NAME_BREAKS):
        if len(part.rstrip()) <= width:
            pieces.append(part)
            continue
        for sub in _pack(_split_after(part, PART_BREAKS), width):
            pieces += [sub[i : i + width] for i in range(0, len(sub), width)]
    return _pack(pieces, width) or [""]


def _text(console: Console) -> str:
    text = str(console.file.getvalue())  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())


def _interval(ci: list[float] | None) -> str:
    return f"{_pct(ci[0])[:-1]}..{_pct(ci[1])}" if ci else "-"


def _common_prefix(names: list[str]) -> str:
    """``sim/`` when every experiment is a variant of ``sim``: the table shows the rest."""
    heads = {n.split("/", 1)[0] for n in names}
    return f"{heads.pop()}/" if len(heads) == 1 and all("/" in n for n in names) else ""


FIGURE_COLUMNS = ("load", "tok/s", "TTFT p50", "TPOT p50", "floor", "GPU W", "lim", "tok/J")


def _figure_cells(row: dict[str, Any]) -> list[list[str]]:
    points = row["points"] or [{}]
    cells = []
    for i, point in enumerate(points):
        first = i == 0
        share = row.get("power_share_of_limit")
        cells.append(
            [
                point_label(point["key"]) if point.get("key") else "-",
                _num(point.get("output_throughput")),
                _num(point.get("median_ttft_ms")),
                _num(point.get("median_tpot_ms"), 2),
                _num(point.get("tpot_floor_ms"), 2),
                _num(row["mean_power_watts"]) if first else "",
                f"{100 * share:.0f}%" if first and isinstance(share, float) else "",
                _num(row["tokens_per_joule"], 3) if first else "",
            ]
        )
    return cells


def experiments_table(doc: dict[str, Any], width: int = WIDTH) -> Table:
    """One row per experiment and load point. The figures never wrap; the name columns get the
    rest of ``width`` and their names are broken between parts by ``name_lines`` (a column's
    width is its content plus 2 of padding, plus 1 between columns: 3 a column in all)."""
    rows = doc["experiments"]
    prefix = _common_prefix([r["name"] for r in rows])
    hosts = sorted({r["host"] or "-" for r in rows})
    where = f" on {hosts[0]}" if len(hosts) == 1 else ""
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"{prefix.rstrip('/') or 'experiments'}{where}: each load point "
        "(latencies in ms; floor = roofline TPOT; lim = share of the GPU power limit)",
    )
    figures = {r["id"]: _figure_cells(r) for r in rows}
    used = sum(
        max([len(name)] + [len(c[k]) for cells in figures.values() for c in cells])
        for k, name in enumerate(FIGURE_COLUMNS)
    )
    host_lines: dict[str, list[str]] = {}
    if len(hosts) > 1:
        host_width = max(4, min(HOST_MAX, max(len(h) for h in hosts)))
        host_lines = {h: name_lines(h, host_width) for h in hosts}
        used += max(len(line) for lines in host_lines.values() for line in lines)
    columns = len(FIGURE_COLUMNS) + 1 + bool(host_lines)
    name_width = max(NAME_MIN, width - used - 3 * columns)
    names = {
        r["id"]: name_lines(
            r["name"].removeprefix(prefix)
            + ("" if r["state"] == "SUCCEEDED" else f" ({r['state']})"),
            name_width,
        )
        for r in rows
    }
    header = "variant" if prefix else "experiment"
    widest = max([len(header)] + [len(line) for lines in names.values() for line in lines])
    table.add_column(header, no_wrap=True, min_width=widest)
    if host_lines:
        table.add_column("host", no_wrap=True)
    for name in FIGURE_COLUMNS:
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        points = figures[row["id"]]
        for i, cells in enumerate(points):
            first = i == 0
            lead = ["\n".join(names[row["id"]]) if first else ""]
            if host_lines:
                lead.append("\n".join(host_lines[row["host"] or "-"]) if first else "")
            table.add_row(*lead, *cells, end_section=i == len(points) - 1)
    return table


def _adjusted(effect: dict[str, Any]) -> list[float] | None:
    """The interval a verdict rests on (a document from before the correction has only ci95)."""
    found: list[float] | None = effect.get("interval_adjusted", effect["ci95"])
    return found


def _verdict(effect: dict[str, Any]) -> str:
    """The verdict; an undecided row says how many more launches of each would decide it."""
    more = effect.get("more_launches")
    return f"{effect['verdict']} (+{more})" if more else effect["verdict"]


def _effects_table(title: str, effects: list[dict[str, Any]]) -> Table:
    counts = {(e["n_baseline"], e["n_variant"]) for e in effects}
    uniform = len(counts) == 1
    if uniform:
        n_base, n_variant = next(iter(counts))
        title += f" ({n_base} baseline, {n_variant} variant launches)"
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    names = ["metric", "at", "baseline", "variant", "change", "adj. interval", "n", "verdict"]
    for name in [n for n in names if n != "n" or not uniform]:
        right = name not in ("metric", "at", "verdict")
        table.add_column(name, justify="right" if right else "left", no_wrap=True)
    for e in effects:
        cells = [
            metric_label(e["metric"]),
            point_label(e["point"]),
            _figure(e["metric"], e["baseline_mean"]),
            _figure(e["metric"], e["mean"]),
            _pct(e["ratio"] - 1 if e["ratio"] is not None else None),
            _interval(_adjusted(e)),
        ]
        cells += [] if uniform else [f"{e['n_baseline']}/{e['n_variant']}"]
        table.add_row(*cells, _verdict(e))
    return table


def answer_lines(doc: dict[str, Any]) -> list[str]:
    """The comparison's answer, led only by what survived the family's correction: per change,
    its verdicts better and worse (the largest of each), else that nothing survived."""
    by_change: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for effect in doc.get("effects", []):
        by_change[effect["change"]].append(effect)
    lines = []
    for change, effects in by_change.items():
        parts = []
        for verdict in (BETTER, WORSE):
            found = [e for e in effects if e["verdict"] == verdict and e["ratio"] is not None]
            if found:
                top = max(found, key=lambda e: abs(e["ratio"] - 1))
                parts.append(
                    f"{verdict} on {len(found)} of {len(effects)} rows (most: {_row(top)})"
                )
        survived = "; ".join(parts) or "nothing survives the correction"
        lines.append(f"{change}: {survived}")
    return sorted(lines, key=lambda line: line.endswith("nothing survives the correction"))


def _row(e: dict[str, Any]) -> str:
    launches = e.get("launches") or [e["n_baseline"], e["n_variant"]]
    return (
        f"{metric_label(e['metric'])} at {point_label(e['point'])} "
        f"{_pct(e['ratio'] - 1)} [{_interval(_adjusted(e))}], {launches[0]}+{launches[1]} launches"
    )


def _too_few(effects: list[dict[str, Any]]) -> str | None:
    """One line instead of a table whose every row would say "not enough repeats" because the
    launches are fewer than MIN_REPEATS (``repeat: 1``)."""
    if not effects or any(e["verdict"] != NOT_ENOUGH for e in effects):
        return None
    n_base = max(e["n_baseline"] for e in effects)
    n_variant = max(e["n_variant"] for e in effects)
    if min(n_base, n_variant) >= MIN_REPEATS:
        return None
    return (
        f"not enough repeats to estimate it: {n_base} baseline and {n_variant} variant "
        f"launch(es), {MIN_REPEATS} of each are needed (repeat: {MIN_REPEATS} in the spec)"
    )


def effects_tables(doc: dict[str, Any]) -> list[Table | str]:
    by_change: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for effect in doc.get("effects", []):
        by_change[effect["change"]].append(effect)
    kind = "main effect" if doc.get("design") == "matrix" else "effect"
    tables: list[Table | str] = []
    for change, effects in by_change.items():
        title = f"{kind} of {change} against the baseline"
        few = _too_few(effects)
        tables.append(f"{title}: {few}" if few else _effects_table(title, effects))
    largest = doc.get("largest_interactions") or []
    if largest:
        table = Table(
            box=box.SIMPLE_HEAD, title="largest interaction per metric", title_justify="left"
        )
        for name in ("metric", "at", "factors", "ratio of ratios", "adj. interval", "verdict"):
            table.add_column(name, overflow="fold")
        for item in largest:
            table.add_row(
                metric_label(item["metric"]),
                point_label(item["point"]),
                item["change"],
                _num(item["ratio"], 3),
                _interval(_adjusted(item)),
                _verdict(item),
            )
        tables.append(table)
    return tables


def render_compare_table(doc: dict[str, Any], width: int = WIDTH) -> str:
    console = _console(width)
    console.print(experiments_table(doc, width))
    for group in doc["repeats"]:
        spreads = ", ".join(
            f"{point_label(k)}: {s['mean']:,.1f} ±{s['stdev']:,.1f} "
            f"(cv {s['cv_percent']:.1f}%, n={s['n']})"
            for k, s in group["output_throughput"].items()
        )
        console.print(f"repeat spread {group['name']} (tok/s): {spreads}")
    tables = effects_tables(doc)
    if tables:
        settings = doc.get("settings") or {}
        console.print("\nanswer (only what survives the correction):")
        for line in answer_lines(doc):
            console.print(f"  {line}")
        correction = describe_correction(doc.get("correction")) or "no correction"
        band = 100 * settings.get("min_effect", 0.02)
        noisy = 100 * settings.get("max_cv", 0.1)
        console.print(
            f"\neffects over launches (a Welch interval on the log ratio); {correction}; "
            "'better'/'worse' = adjusted p <= 5% and the adjusted interval off 0; 'no meaningful "
            f"difference' = that interval inside ±{band:g}%; 'not enough repeats (+k)' = under 3 "
            f"launches, a CV over {noisy:g}%, or an interval too wide to decide, k more launches "
            "of each variant would decide it at this spread"
        )
    for table in tables:
        console.print(table)
    for line in prompt_token_lines(doc):
        console.print(line)
    more = next_launches(doc)
    if more is not None:
        console.print(
            f"\n{more.sentence()}: submit the spec (SPEC.yaml) again with repeat: {more.more}, "
            "then compare old and new launches together:"
        )
        for command in more.commands:
            console.print(f"  {command}", soft_wrap=True)
    for line in doc.get("timeline_differences") or []:  # docs/timeline.md
        console.print(f"timeline: {line}", highlight=False, markup=False)
    for warning in doc.get("warnings", []):
        console.print(f"warning: {warning}")
    return _text(console)


def prompt_token_lines(doc: dict[str, Any]) -> list[str]:
    """The server's mean prompt tokens: one line when every experiment's is the same (to 0.1),
    else one per experiment; "lengths approximate" where a run had no tokenizer."""
    said = [
        (row["name"], prompt_tokens_line(row["points"], row.get("lengths_exact")))
        for row in doc["experiments"]
    ]
    lines = {line for _, line in said if line}
    if len(lines) == 1 and all(line for _, line in said):
        return [lines.pop()]
    return [f"{name}: {line}" for name, line in said if line]


POINT_COLUMNS = (
    "output_throughput",
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
)


def render_compare_csv(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    varied = doc["varied_fields"]
    header = ["id", "name", "state", "host", *varied, "concurrency", "request_rate", *POINT_COLUMNS]
    header += ["mean_power_watts", "tokens_per_joule"]
    writer.writerow(header)
    for row in doc["experiments"]:
        base = [
            row["id"],
            row["name"],
            row["state"],
            row["host"] or "",
            *[row["varied"].get(v, "") for v in varied],
        ]
        for point in row["points"] or [{}]:
            figures = [point.get(name) for name in POINT_COLUMNS]
            extra = [row["mean_power_watts"], row["tokens_per_joule"]]
            rate = point.get("request_rate") or ""
            writer.writerow([*base, point.get("concurrency") or "", rate, *figures, *extra])
    return out.getvalue()
