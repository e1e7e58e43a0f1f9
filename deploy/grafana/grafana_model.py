"""Builders for the parts of Grafana's dashboard JSON model that the tunelab dashboards use.

Plain dicts rather than a library: three dashboards use five panel kinds, and the JSON that
Grafana provisions stays recognisable in the code that makes it. Every panel and variable reads
the data source through the ``datasource`` variable, which defaults to Grafana's default data
source (the provisioned one), so the dashboards also import into an existing Grafana.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

DATASOURCE: JSON = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
SCHEMA_VERSION = 39


@dataclass(frozen=True)
class Query:
    """One PromQL target. ``instant`` queries read the value at the dashboard's end time."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False  # one row per series (instant tables)


def target(query: Query, ref_id: str) -> JSON:
    out: JSON = {
        "refId": ref_id,
        "datasource": DATASOURCE,
        "expr": query.expr,
        "instant": query.instant,
        "range": not query.instant,
    }
    if query.legend:
        out["legendFormat"] = query.legend
    if query.table:
        out["format"] = "table"
    return out


def thresholds(*steps: tuple[str, float | None]) -> JSON:
    """Colour steps; the first applies from minus infinity (value None)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def dashed(ref_id: str) -> JSON:
    """Draw one query as a thin dashed line: limits and maxima beside the measured value."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref_id},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "custom.fillOpacity", "value": 0},
        ],
    }


def right_axis(ref_id: str, unit: str) -> JSON:
    """Put one query on a right-hand axis with its own unit (two measures on one time axis)."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref_id},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def color_by_name(colors: dict[str, str]) -> list[JSON]:
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}],
        }
        for name, color in colors.items()
    ]


@dataclass
class Panel:
    """A panel before layout: kind, title, queries and its JSON options."""

    kind: str
    title: str
    description: str
    queries: Sequence[Query]
    width: int = 12
    height: int = 8
    defaults: JSON = field(default_factory=dict)
    overrides: list[JSON] = field(default_factory=list)
    options: JSON = field(default_factory=dict)
    transformations: list[JSON] = field(default_factory=list)
    interval: str = ""  # the panel's minimum step, e.g. for counters read every 15 s

    def to_json(self, panel_id: int, x: int, y: int) -> JSON:
        out: JSON = {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "targets": [target(q, chr(ord("A") + i)) for i, q in enumerate(self.queries)],
            "fieldConfig": {"defaults": self.defaults, "overrides": self.overrides},
            "options": self.options,
        }
        if self.transformations:
            out["transformations"] = self.transformations
        if self.interval:
            out["interval"] = self.interval
        return out


@dataclass(frozen=True)
class Row:
    """A full-width heading that groups the panels after it."""

    title: str


def layout(items: Sequence[Panel | Row]) -> list[JSON]:
    """Place panels left to right, wrapping at the grid width; a row starts a new line."""
    panels: list[JSON] = []
    x = y = line_height = 0
    for panel_id, item in enumerate(items, start=1):
        if isinstance(item, Row):
            y += line_height
            panels.append(
                {
                    "id": panel_id,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                    "panels": [],
                }
            )
            x, y, line_height = 0, y + 1, 0
            continue
        if x + item.width > GRID_WIDTH:
            x, y, line_height = 0, y + line_height, 0
        panels.append(item.to_json(panel_id, x, y))
        x += item.width
        line_height = max(line_height, item.height)
    return panels


def datasource_variable() -> JSON:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(name: str, label: str, metric: str, label_name: str) -> JSON:
    """``label_values(metric, label_name)`` over the dashboard's time range, multi-select with
    an All option that matches everything (``.*``)."""
    definition = f"label_values({metric}, {label_name})"
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": definition,
        "query": definition,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
        "regex": "",
        "hide": 0,
        "options": [],
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: Sequence[JSON],
    items: Sequence[Panel | Row],
    time_from: str = "now-1h",
    refresh: str = "10s",
) -> JSON:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["tunelab"],
        "editable": True,
        "graphTooltip": 1,  # shared crosshair: one moment across every panel
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "browser",
        "time": {"from": time_from, "to": "now"},
        "refresh": refresh,
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "title": "tunelab",
                "tags": ["tunelab"],
                "asDropdown": False,
                "includeVars": False,
                "keepTime": True,
            }
        ],
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": layout(items),
    }
