"""What changed since the baseline, never showing a secret; the verdict line."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tunelab.analysis.report.provenance import provenance_summary
from tunelab.common.sanitize import printable

MASK = "(hidden)"
MAX_LINE = 2000
MINUS = "\u2212"  # a typographic minus, as the report prints
_SECRET = re.compile(r"key|token|secret|passw|credential|auth", re.IGNORECASE)
_PORT_FLAG = re.compile(r"--?[\w-]*port", re.IGNORECASE)


def _masked(prov: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with values of secret-looking environment variables and flags hidden."""
    doc = dict(prov)
    env = doc.get("env") or {}
    doc["env"] = {k: (MASK if _SECRET.search(str(k)) else v) for k, v in env.items()}
    argv = [str(a) for a in doc.get("argv") or []]
    clean: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, _ = arg.partition("=")
        if eq and flag.startswith("-") and _SECRET.search(flag):
            clean.append(f"{flag}={MASK}")
        elif (
            i
            and argv[i - 1].startswith("-")
            and _SECRET.search(argv[i - 1])
            and "=" not in argv[i - 1]
        ):
            clean.append(MASK)
        else:
            clean.append(arg)
    doc["argv"] = _ports_unnumbered(clean)
    return doc


def _ports_unnumbered(argv: list[str]) -> list[str]:
    """``--port 31863`` as ``--port PORT`` (any flag ending in "port"): each launch gets a
    free port of its own, which is no change of what ran."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if eq and _PORT_FLAG.fullmatch(flag) and value.isdigit():
            out.append(f"{flag}=PORT")
        elif i and _PORT_FLAG.fullmatch(argv[i - 1]) and arg.isdigit():
            out.append("PORT")
        else:
            out.append(arg)
    return out


def provenance_changes(
    current: Mapping[str, Any], baseline: Mapping[str, Any]
) -> list[dict[str, str]]:
    """What differs between two provenance documents, field by field in the report's reading
    order (``tunelab show``'s labels), never showing a secret."""
    before = provenance_summary(_masked(baseline))
    after = provenance_summary(_masked(current))
    out = []
    for field in list(after) + [f for f in before if f not in after]:
        b, a = before.get(field, "-"), after.get(field, "-")
        if a != b:
            out.append({"field": field, "before": b, "after": a})
    audit_b, audit_a = baseline.get("audit"), current.get("audit")
    if audit_a != audit_b and (audit_a or audit_b):
        out.append({"field": "audit", "before": _text(audit_b), "after": _text(audit_a)})
    return out


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "-"
    return "-" if value is None else str(value)


def arrow(change: Mapping[str, str]) -> str:
    b, a = change["before"].split(" "), change["after"].split(" ")
    common = 0
    while common < min(len(a), len(b)) - 1 and a[common] == b[common]:
        common += 1
    prefix = " ".join(a[:common])
    return f"{prefix + ' ' if prefix else ''}{' '.join(b[common:])} → {' '.join(a[common:])}"


def _num(value: float) -> str:
    return (
        f"{value:+.0f}".replace("-", MINUS)
        if abs(value) >= 1
        else f"{value:+.1f}".replace("-", MINUS)
    )


def verdict_line(metric_row: Mapping[str, Any], changes: Sequence[Mapping[str, str]]) -> str:
    """``output_throughput -18 % [-21, -15] (regression, 3 vs 3 launches) — changed since the
    baseline: sglang 0.5.2 → 0.5.3``."""
    n_cur, n_base = metric_row["launches"]
    head = str(metric_row["metric"])
    if metric_row.get("change_pct") is not None:
        lo, hi = metric_row["interval"]
        head += f" {_num(metric_row['change_pct'])} % [{_num(lo)}, {_num(hi)}]"
    line = f"{head} ({metric_row['verdict']}, {n_cur} vs {n_base} launches)"
    if metric_row.get("missing"):
        line += f"; {metric_row['missing']}"
    if changes:
        line += " — changed since the baseline: " + "; ".join(arrow(c) for c in changes)
    return printable(line, MAX_LINE)  # changes hold what servers and checkpoints said
