"""The panel kinds the dashboards use, with the options Grafana needs for each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grafana_model import JSON, Panel, Query

LEGEND = {"showLegend": True, "displayMode": "list", "placement": "bottom", "calcs": []}
LAST_VALUE = {"calcs": ["lastNotNull"], "fields": "", "values": False}


def timeseries(
    title: str,
    description: str,
    *queries: Query,
    unit: str = "short",
    stacked_bars: bool = False,
    threshold_lines: JSON | None = None,
    **kw: Any,
) -> Panel:
    """Lines over time (or stacked bars); ``threshold_lines`` draws its steps as lines."""
    custom: JSON = {
        "drawStyle": "bars" if stacked_bars else "line",
        "lineWidth": 1,
        "fillOpacity": 80 if stacked_bars else 10,
        "showPoints": "never",
        "spanNulls": False,
        "axisSoftMin": 0,
        "stacking": {"mode": "normal" if stacked_bars else "none", "group": "A"},
    }
    defaults: JSON = {"unit": unit, "color": {"mode": "palette-classic"}, "custom": custom}
    if threshold_lines is not None:
        defaults["thresholds"] = threshold_lines
        custom["thresholdsStyle"] = {"mode": "line"}
    defaults.update(kw.pop("defaults", {}))
    options = {"legend": LEGEND, "tooltip": {"mode": "multi", "sort": "desc"}}
    return Panel(
        "timeseries", title, description, queries, defaults=defaults, options=options, **kw
    )


def stat(title: str, description: str, *queries: Query, unit: str = "short", **kw: Any) -> Panel:
    defaults: JSON = {"unit": unit, "color": {"mode": "thresholds"}}
    defaults.update(kw.pop("defaults", {}))
    options = {
        "reduceOptions": LAST_VALUE,
        "orientation": "auto",
        "textMode": "value_and_name",
        "colorMode": "value",
        "graphMode": "none",
        "justifyMode": "auto",
    }
    kw.setdefault("height", 5)
    return Panel("stat", title, description, queries, defaults=defaults, options=options, **kw)


def bargauge(
    title: str, description: str, *queries: Query, unit: str = "short", **kw: Any
) -> Panel:
    """Horizontal bars, one per series, at the dashboard's end time."""
    defaults: JSON = {"unit": unit, "min": 0, "color": {"mode": "continuous-BlPu"}}
    defaults.update(kw.pop("defaults", {}))
    options = {
        "reduceOptions": LAST_VALUE,
        "orientation": "horizontal",
        "displayMode": "gradient",
        "showUnfilled": True,
        "valueMode": "color",
        "namePlacement": "auto",
        "minVizHeight": 16,
        "minVizWidth": 0,
    }
    return Panel("bargauge", title, description, queries, defaults=defaults, options=options, **kw)


def table(
    title: str,
    description: str,
    *queries: Query,
    hide: Sequence[str] = ("Time", "__name__", "instance", "job"),
    rename: dict[str, str] | None = None,
    transformations: Sequence[JSON] = (),
    unit: str = "short",
    **kw: Any,
) -> Panel:
    """A table of instant queries; the label columns that say nothing here are hidden."""
    organize = {
        "id": "organize",
        "options": {
            "excludeByName": dict.fromkeys(hide, True),
            "indexByName": {},
            "renameByName": rename or {},
        },
    }
    options = {
        "showHeader": True,
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "fields": ""},
    }
    defaults: JSON = {"unit": unit, "custom": {"align": "auto"}}
    defaults.update(kw.pop("defaults", {}))
    return Panel(
        "table",
        title,
        description,
        queries,
        defaults=defaults,
        options=options,
        transformations=[*transformations, organize],
        **kw,
    )


def state_timeline(title: str, description: str, *queries: Query, **kw: Any) -> Panel:
    """One row per series, coloured while the value is 1 (a condition that holds)."""
    defaults: JSON = {
        "color": {"mode": "thresholds"},
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": "transparent", "value": None}, {"color": "red", "value": 1}],
        },
        "mappings": [{"type": "value", "options": {"1": {"text": "active", "index": 0}}}],
        "custom": {"fillOpacity": 80, "lineWidth": 0},
    }
    options = {
        "mergeValues": True,
        "showValue": "never",
        "alignValue": "left",
        "rowHeight": 0.8,
        "legend": {**LEGEND, "showLegend": False},
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return Panel(
        "state-timeline", title, description, queries, defaults=defaults, options=options, **kw
    )


def matrix(row_field: str, column_field: str, numeric_columns: bool = True) -> list[JSON]:
    """Transformations that turn one instant series per (row, column) into a matrix; numeric
    column labels (concurrency) are sorted as numbers first, so 4 comes before 16."""
    steps: list[JSON] = []
    if numeric_columns:
        steps += [
            {
                "id": "convertFieldType",
                "options": {
                    "conversions": [{"targetField": column_field, "destinationType": "number"}],
                    "fields": {},
                },
            },
            {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": column_field}]}},
        ]
    steps.append(
        {
            "id": "groupingToMatrix",
            "options": {
                "columnField": column_field,
                "rowField": row_field,
                "valueField": "Value",
            },
        }
    )
    return steps
