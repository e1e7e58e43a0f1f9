"""Run the catalogue (or part of it) over one host view and build the report document."""

from __future__ import annotations

import difflib
import struct
import time
from collections.abc import Iterable
from typing import Any

from tunelab.agent.audit.checks import CHECK_IDS, CHECKS
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.model import Check, CheckResult, Finding, Status
from tunelab.agent.audit.pciconfig import ConfigSpaceError
from tunelab.agent.gpu import GpuError
from tunelab.common import __version__

# What a check may raise on a host that surprises it; anything else is a bug and propagates.
CHECK_FAILURES = (OSError, ValueError, KeyError, IndexError, struct.error, GpuError)


class UnknownCheck(ValueError):
    """``--only`` named ids that do not exist; the message says the id each was likely meant
    to be, and where the list is (all the ids on one line were 600 characters)."""

    def __init__(self, unknown: list[str]) -> None:
        self.unknown = unknown
        said = []
        for name in unknown:
            close = difflib.get_close_matches(name, CHECK_IDS, n=1, cutoff=0.6)
            said.append(f"{name}, did you mean {close[0]}?" if close else name)
        super().__init__(f"unknown check id {'; '.join(said)} (--list: all {len(CHECK_IDS)})")


def parse_only(values: Iterable[str]) -> list[str]:
    """``["cpu.governor,pcie.acs", "mem.thp"]`` → ids, each validated."""
    ids = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = [i for i in ids if i not in CHECK_IDS]
    if unknown:
        raise UnknownCheck(unknown)
    return ids


def select(only: Iterable[str] = ()) -> list[Check]:
    wanted = set(parse_only(only))
    return [check for check in CHECKS if not wanted or check.id in wanted]


def run_check(check: Check, ctx: AuditContext) -> CheckResult:
    try:
        finding = check.run(ctx)
    except ConfigSpaceError as exc:
        finding = Finding(Status.ERROR, f"config space: {exc}")
    except CHECK_FAILURES as exc:
        finding = Finding(Status.ERROR, f"{type(exc).__name__}: {exc}")
    return CheckResult(
        id=check.id,
        title=check.title,
        status=finding.status,
        observed=finding.observed,
        expected=finding.expected,
        evidence=tuple(finding.evidence),
        remediation=finding.remediation,
    )


def run_audit(ctx: AuditContext, only: Iterable[str] = ()) -> dict[str, Any]:
    """The report document (the ``--json`` contract; keys are only ever added)."""
    checks = select(only)
    results = [run_check(check, ctx).to_dict() for check in checks]
    return {
        "host": ctx.system.read_line("/proc/sys/kernel/hostname") or "unknown",
        "environment": ctx.environment.kind,
        "kernel": ctx.kernel_release,
        "root": str(ctx.system.root),
        "generated_at": round(time.time(), 3),
        "tunelab_version": __version__,
        "checks": results,
    }
