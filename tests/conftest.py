"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_proc import AgentProcess
from tests.support.postgres import PostgresServer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """A real agent process on a free loopback port; stopped (not its servers) at the end."""
    proc = AgentProcess(tmp_path / "agent").start()
    try:
        yield proc
    finally:
        proc.terminate()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (started on first use); tests take a fresh
    database each with ``postgres.new_database()``."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()
