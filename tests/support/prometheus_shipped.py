"""The PromQL that deploy/ ships, gathered for evaluation: every recording rule, every dashboard
target and template variable, with Grafana's variables replaced the way Grafana replaces them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
RULE_FILES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))

LABEL_VALUES = re.compile(r"^label_values\((?P<metric>.+),\s*(?P<label>[a-zA-Z_]\w*)\)$")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class ShippedQuery:
    where: str  # file and panel or rule, for messages
    expr: str  # as shipped, Grafana variables included
    min_interval: float = 0.0  # the panel's minimum step, seconds


@dataclass(frozen=True)
class Variable:
    name: str
    metric: str  # the match[] selector, may use earlier variables
    label: str


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in DASHBOARDS}


def rules() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [{**rule, "file": path.name} for rule in group["rules"]]
    return out


def rule_queries() -> list[ShippedQuery]:
    return [ShippedQuery(f"{r['file']}: {r['record']}", r["expr"].strip()) for r in rules()]


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included (rows themselves have no queries)."""
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out += panel.get("panels", [])
    return out


def dashboard_queries(name: str, dashboard: dict[str, Any]) -> list[ShippedQuery]:
    out = []
    for panel in panels(dashboard):
        interval = parse_seconds(panel.get("interval") or "0s")
        for target in panel.get("targets", []):
            where = f"{name}: {panel['title']!r} {target['refId']}"
            out.append(ShippedQuery(where, target["expr"], interval))
    return out


def variables(dashboard: dict[str, Any]) -> list[Variable]:
    """The query variables, in the order Grafana resolves them."""
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = LABEL_VALUES.match(var["query"])
        assert match, f"variable {var['name']}: expected label_values(METRIC, LABEL)"
        out.append(Variable(var["name"], match["metric"].strip(), match["label"]))
    return out


def parse_seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    assert match, f"bad interval {text!r}"
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def regex_value(values: list[str]) -> str:
    """Grafana's value for a multi-value variable inside ``=~"..."``: escaped alternatives."""
    escaped = [re.escape(v).replace("\\", "\\\\") for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr: str, values: dict[str, str], rate_interval: float) -> str:
    """Replace ``$var`` / ``${var}`` and ``$__rate_interval``; any other variable is an error."""
    expr = expr.replace("$__rate_interval", f"{round(rate_interval * 1000)}ms")

    def replace(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        assert name in values, f"undefined variable ${name} in {expr}"
        return values[name]

    return VARIABLE.sub(replace, expr)


def rate_interval(min_interval: float, scrape_interval: float) -> float:
    """Grafana's $__rate_interval: at least four scrapes, and one scrape more than the step."""
    return max(4 * scrape_interval, min_interval + scrape_interval)


def metric_names(
    expr: str, prefixes: tuple[str, ...] = ("tunelab_", "vllm_", "sglang_")
) -> set[str]:
    """Series names the expression reads: tunelab/engine metrics and recording rules."""
    strings_removed = re.sub(r'"[^"]*"', '""', expr)
    return {
        token
        for token in METRIC_NAME.findall(strings_removed)
        if token.startswith(prefixes) or ":" in token
    }
