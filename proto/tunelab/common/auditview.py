"""How an audit report document is shown and what exit code it means.

Both ``tunelab-agent audit`` (on the host) and ``tunelab audit --agent`` (from a laptop, with the
document the RunAudit RPC returns) render through here, so the two print the same table and exit
with the same code. The document is plain JSON data (see README, "Audit a new host").
"""

from __future__ import annotations

import datetime as _dt
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

EXIT_OK = 0  # no check failed
EXIT_FAILED = 1  # at least one check FAILed
STATUSES = ("PASS", "WARN", "FAIL", "SKIP", "ERROR")
WIDTH = 100  # fixed, so the host and the laptop wrap identically
_COLOURS = {"PASS": "32", "WARN": "33", "FAIL": "1;31", "SKIP": "2", "ERROR": "35"}


def exit_code(report: Mapping[str, Any]) -> int:
    """1 when any check FAILed, else 0 (WARN and ERROR are shown, not fatal)."""
    failed = any(c.get("status") == "FAIL" for c in report.get("checks", []))
    return EXIT_FAILED if failed else EXIT_OK


def counts(report: Mapping[str, Any]) -> dict[str, int]:
    found = Counter(str(c.get("status")) for c in report.get("checks", []))
    return {status: found.get(status, 0) for status in STATUSES}


def _paint(text: str, status: str, colour: bool) -> str:
    return f"\x1b[{_COLOURS[status]}m{text}\x1b[0m" if colour and status in _COLOURS else text


def _when(report: Mapping[str, Any]) -> str:
    stamp = report.get("generated_at")
    if not isinstance(stamp, int | float):
        return "unknown time"
    moment = _dt.datetime.fromtimestamp(float(stamp), tz=_dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _wrapped(label: str, text: str, indent: int) -> list[str]:
    lead = " " * indent + (f"{label:<9}" if label else "")
    return textwrap.wrap(
        text,
        width=WIDTH,
        initial_indent=lead,
        subsequent_indent=" " * len(lead),
        break_on_hyphens=False,
        break_long_words=False,
    ) or [lead.rstrip()]


def header(report: Mapping[str, Any]) -> str:
    parts = [f"host {report.get('host', '?')}", str(report.get("environment", "?"))]
    if report.get("kernel"):
        parts.append(f"kernel {report['kernel']}")
    parts.append(_when(report))
    return " · ".join(parts)


def render_table(report: Mapping[str, Any], colour: bool = False) -> str:
    """One line per check; WARN/FAIL/ERROR also show what was expected and the fix."""
    checks: Sequence[Mapping[str, Any]] = report.get("checks", [])
    id_width = max((len(str(c.get("id", ""))) for c in checks), default=10) + 2
    lines = [header(report), ""]
    for check in checks:
        status = str(check.get("status", "?"))
        lead = f"{_paint(f'{status:<5}', status, colour)} {check.get('id')!s:<{id_width}}"
        body = _wrapped("", str(check.get("observed", "")), 6 + id_width)
        lines.append(lead + body[0].lstrip())
        lines += body[1:]
        if status not in ("WARN", "FAIL", "ERROR"):
            continue
        indent = 6 + id_width
        if check.get("expected"):
            lines += _wrapped("expected", str(check["expected"]), indent)
        fix = check.get("remediation") or {}
        if fix.get("command"):
            lines += _wrapped("fix", str(fix["command"]), indent)
        if fix.get("persistent"):
            lines += _wrapped("persist", str(fix["persistent"]), indent)
        if fix.get("reboot_required"):
            lines += _wrapped("reboot", "required", indent)
    tally = counts(report)
    lines += ["", " · ".join(_paint(f"{n} {s}", s, colour and n > 0) for s, n in tally.items())]
    return "\n".join(lines) + "\n"
