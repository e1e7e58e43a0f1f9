"""Helpers for the audit tests: build a scenario host under tmp_path and audit it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tunelab.agent.audit.capture import make_nodes
from tunelab.agent.audit.context import AuditContext
from tunelab.agent.audit.runner import run_audit
from tunelab.agent.gpu import GpuBackend
from tunelab.agent.system import System

Audit = Callable[..., dict[str, Any]]


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["id"]: check for check in report["checks"]}


@pytest.fixture
def as_root() -> None:
    """Device nodes are made with mknod, which needs root (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mknod of /dev/nvidia* fixture nodes needs root")


@pytest.fixture
def audit() -> Audit:
    def run(
        root: Path, gpu: GpuBackend | None = None, only: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        if (root / ".tunelab-capture" / "dev-nodes.json").exists() and os.geteuid() == 0:
            make_nodes(root)
        reason = "" if gpu is not None else "no NVML snapshot in this test"
        return run_audit(AuditContext(System(root), gpu, reason), only)

    return run
