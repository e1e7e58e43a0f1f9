"""What a check returns, and how a check is declared.

A check is a plain function ``(AuditContext) -> CheckResult``. The result carries everything a
person needs to act without re-running anything: what was seen, what was expected, the raw facts
it was judged from (``evidence``), and the commands that fix it. The JSON form of a result is a
contract (``tunelab-agent audit --json``, the RunAudit RPC, ``--compare``): keys are only added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.agent.audit.context import AuditContext


class Status(StrEnum):
    PASS = "PASS"  # noqa: S105 (a status, not a password)
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"  # does not apply here; ``observed`` says why
    ERROR = "ERROR"  # could not be judged; ``observed`` says what went wrong


# Worst first: a check that looks at several devices reports the worst of them.
SEVERITY = {Status.FAIL: 4, Status.ERROR: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


def worst(statuses: Iterable[Status]) -> Status:
    found = list(statuses)
    return max(found, key=SEVERITY.__getitem__) if found else Status.SKIP


@dataclass(frozen=True)
class Evidence:
    """One fact read: a path, a register or an NVML field, and its raw value."""

    source: str
    value: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "value": self.value}


@dataclass(frozen=True)
class Remediation:
    """``command`` fixes it now (for a person to review); ``persistent`` survives a reboot."""

    command: str = ""
    persistent: str = ""
    reboot_required: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "persistent": self.persistent,
            "reboot_required": self.reboot_required,
        }


NO_FIX = Remediation()


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    status: Status
    observed: str
    expected: str = ""
    evidence: tuple[Evidence, ...] = ()
    remediation: Remediation = NO_FIX

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "observed": self.observed,
            "expected": self.expected,
            "evidence": [e.to_dict() for e in self.evidence],
            "remediation": self.remediation.to_dict(),
        }


CheckFn = Callable[["AuditContext"], "Finding"]


@dataclass
class Finding:
    """What a check function returns; the runner adds the id and title."""

    status: Status
    observed: str
    expected: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    remediation: Remediation = NO_FIX


def skip(reason: str, evidence: Iterable[Evidence] = ()) -> Finding:
    return Finding(Status.SKIP, reason, evidence=list(evidence))


@dataclass(frozen=True)
class Check:
    """A registered check: stable id, a one-line title, the function."""

    id: str
    title: str
    run: CheckFn
    needs_nvml: bool = False


def ev(source: str, value: object) -> Evidence:
    """Evidence with the value as text (None becomes ``absent``)."""
    if value is None:
        return Evidence(source, "absent")
    if isinstance(value, bytes):
        return Evidence(source, value.hex())
    return Evidence(source, str(value))
