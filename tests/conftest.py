"""Fixtures shared by every test layer."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_proc import AgentProcess

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# tests/engines needs a real vLLM: only `make test-engines` (which sets this) collects it.
collect_ignore = [] if os.environ.get("TUNELAB_ENGINES_VENV") else ["engines"]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """A real agent process on a free loopback port; stopped (not its servers) at the end."""
    proc = AgentProcess(tmp_path / "agent").start()
    try:
        yield proc
    finally:
        proc.terminate()
