"""Spec errors carry every problem found, each with the path of its field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecIssue:
    path: str  # e.g. "server.env.NCCL_P2P_LEVEL" or "[1].benchmark.concurrency[2]"
    problem: str  # e.g. "must be a string"

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}" if self.path else self.problem


class SpecError(ValueError):
    """The spec file is wrong; nothing from it was queued."""

    def __init__(self, issues: list[SpecIssue], source: str = "") -> None:
        self.issues = issues
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + "; ".join(str(i) for i in issues))
