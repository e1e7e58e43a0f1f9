"""Derived views of a report document: the reviewable fix script and the diff against an old one.

Both work on the JSON document only, so an old report saved before a kernel upgrade can be
compared with today's, and a report fetched over RPC can be turned into a script.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunelab.agent.audit.checks import CHECK_IDS
from tunelab.common.auditview import header


class ReportFileError(ValueError):
    """An ``--compare`` file is not a report document; the message names what is wrong."""


def fix_script(report: Mapping[str, Any]) -> str:
    """A POSIX shell script of the runtime fixes, each under its finding; nothing is run."""
    lines = [
        "#!/bin/sh",
        f"# tunelab-agent audit --fix-script: {header(report)}",
        "# Review every command before running it as root; nothing here has been applied.",
        "# These fixes do not survive a reboot: each block names the persistent fix.",
        "set -eu",
    ]
    fixed: list[str] = []
    manual: list[str] = []
    for check in report.get("checks", []):
        if check.get("status") not in ("WARN", "FAIL"):
            continue
        remedy = check.get("remediation") or {}
        command = str(remedy.get("command") or "")
        block = [
            "",
            f"# --- {check['id']} ({check['status']}): {_one_line(check.get('observed'))}",
            f"# expected: {_one_line(check.get('expected'))}",
        ]
        if remedy.get("persistent"):
            block.append(f"# persistent: {_one_line(remedy['persistent'])}")
        if remedy.get("reboot_required"):
            block.append("# a reboot is needed for the persistent fix")
        if command:
            block += script_lines(command)
            fixed.append(str(check["id"]))
        else:
            block.append("# no runtime fix: see the persistent fix above")
            manual.append(str(check["id"]))
        lines += block
    if not fixed and not manual:
        lines += ["", "# nothing to fix: no check WARNed or FAILed"]
    if fixed:
        lines += [
            "",
            "# re-check what this script changed:",
            f"# tunelab-agent audit --only {','.join(fixed)}",
        ]
    return "\n".join(lines) + "\n"


def script_lines(command: str) -> list[str]:
    """One script line per ``; ``-separated part of a remediation command. Once a part starts a
    comment (``cmd  # or: alt``), every later part is an alternative and stays commented; a part
    holding a newline, a carriage return or a NUL (only a forged report has one) is commented
    out whole, so it can never run. Values in commands are shell-quoted where the checks build
    them (``shlex.quote``)."""
    lines: list[str] = []
    commented = False
    for raw in command.split("; "):
        part = raw.strip()
        if not part:
            continue
        if any(c in part for c in "\n\r\0"):
            lines.append("# refused (not one shell line): " + _one_line(part.replace("\0", " ")))
            continue
        if commented:
            lines.append(f"# {part}")
            continue
        lines.append(part)
        commented = _starts_comment(part)
    return lines


def _starts_comment(line: str) -> bool:
    """Whether ``line`` holds a shell comment outside quotes (``#`` after whitespace)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return True
    return False


def _one_line(value: object) -> str:
    return " ".join(str(value or "").split())


def load_report(path: Path) -> dict[str, Any]:
    """Read and validate an old report (``tunelab-agent audit --json > OLD.json``)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ReportFileError(f"--compare {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ReportFileError(f"--compare {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ReportFileError(f"--compare {path}: expected a JSON object (an audit report)")
    checks = data.get("checks")
    if not isinstance(checks, list):
        raise ReportFileError(f"--compare {path}: field 'checks' must be a list of check results")
    for index, check in enumerate(checks):
        if not isinstance(check, dict) or not isinstance(check.get("id"), str):
            raise ReportFileError(f"--compare {path}: checks[{index}].id must be a string")
        if check.get("status") not in ("PASS", "WARN", "FAIL", "SKIP", "ERROR"):
            raise ReportFileError(
                f"--compare {path}: checks[{index}].status must be PASS, WARN, FAIL, SKIP or ERROR"
            )
    return data


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What changed: host facts, then each check whose status or observation moved."""
    changes: list[dict[str, Any]] = []
    for key in ("host", "environment", "kernel"):
        if old.get(key) != new.get(key):
            changes.append({"id": key, "change": "host", "old": old.get(key), "new": new.get(key)})
    before = {c["id"]: c for c in old.get("checks", [])}
    after = {c["id"]: c for c in new.get("checks", [])}
    order = [i for i in CHECK_IDS if i in before or i in after]
    order += sorted((set(before) | set(after)) - set(order))
    for check_id in order:
        was, now = before.get(check_id), after.get(check_id)
        if was is None or now is None:
            kind = "added" if was is None else "removed"
            present = now if now is not None else was
            if present is not None:
                changes.append({"id": check_id, "change": kind, **_state(present, kind)})
        elif was.get("status") != now.get("status"):
            changes.append(
                {
                    "id": check_id,
                    "change": "status",
                    "old": was["status"],
                    "new": now["status"],
                    "observed": now.get("observed", ""),
                }
            )
        elif was.get("observed") != now.get("observed"):
            changes.append(
                {
                    "id": check_id,
                    "change": "observed",
                    "old": was.get("observed"),
                    "new": now.get("observed"),
                    "status": now.get("status"),
                }
            )
    return changes


def _state(check: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {"status": check.get("status"), "observed": check.get("observed", ""), "note": kind}


def render_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], changes: list[dict[str, Any]]
) -> str:
    lines = [f"changes since {header(old)}", f"           to {header(new)}", ""]
    if not changes:
        lines.append("no change")
    width = max((len(str(c["id"])) for c in changes), default=10) + 2
    for change in changes:
        name = f"{change['id']:<{width}}"
        if change["change"] in ("host", "status"):
            tail = f"  {change['observed']}" if change.get("observed") else ""
            lines.append(f"{name}{change['old']} -> {change['new']}{tail}")
        elif change["change"] == "observed":
            lines.append(f"{name}{change['status']}: {change['old']}")
            lines.append(f"{' ' * width}{' ' * len(str(change['status']))}  -> {change['new']}")
        else:
            lines.append(f"{name}{change['change']} ({change['status']}): {change['observed']}")
    unchanged = len(new.get("checks", [])) - sum(1 for c in changes if c["change"] != "host")
    lines += ["", f"{unchanged} check(s) unchanged"]
    return "\n".join(lines) + "\n"
