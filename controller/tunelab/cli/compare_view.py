"""Rendering ``tunelab compare``: a side-by-side table, or CSV with one row per sweep point."""

from __future__ import annotations

import csv
import io
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def _label(key: str) -> str:
    return {"c": "c=", "r": "rate=", "p": "point "}[key[0]] + key[1:]


def render_compare_table(doc: dict[str, Any], width: int = 200) -> str:
    keys: list[str] = doc["point_keys"]
    table = Table(box=box.SIMPLE_HEAD, title="output tok/s per concurrency; TTFT/TPOT p50 in ms")
    table.add_column("experiment")
    table.add_column("host")
    for field in doc["varied_fields"]:
        table.add_column(field.split(".")[-1])
    for key in keys:
        table.add_column(f"tok/s {_label(key)}", justify="right")
    table.add_column("TTFT p50", justify="right")
    table.add_column("TPOT p50", justify="right")
    table.add_column("GPU W", justify="right")
    table.add_column("tok/J", justify="right")
    for row in doc["experiments"]:
        points = {p["key"]: p for p in row["points"]}
        cells = [f"{row['name']} ({row['state']})", row["host"] or "-"]
        cells += [row["varied"].get(field, "(base)") for field in doc["varied_fields"]]
        cells += [_num(points.get(k, {}).get("output_throughput")) for k in keys]
        cells.append("/".join(_num(points.get(k, {}).get("median_ttft_ms")) for k in keys) or "-")
        cells.append(
            "/".join(_num(points.get(k, {}).get("median_tpot_ms"), 2) for k in keys) or "-"
        )
        cells.append(_num(row["mean_power_watts"]))
        cells.append(_num(row["tokens_per_joule"], 2))
        table.add_row(*cells)
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(table)
    for group in doc["repeats"]:
        spreads = ", ".join(
            f"{_label(k)}: {s['mean']:,.1f} ±{s['stdev']:,.1f} "
            f"(cv {s['cv_percent']:.1f}%, n={s['n']})"
            for k, s in group["output_throughput"].items()
        )
        console.print(f"repeat spread {group['name']}: {spreads}")
    output = console.file.getvalue()  # type: ignore[attr-defined]
    return str(output).rstrip("\n")


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
