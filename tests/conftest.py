"""Fixtures shared by every test layer."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import psutil
import pytest

from tests.support import daemon_proc
from tests.support.agent_proc import AgentProcess
from tests.support.leftovers import kill_processes_under, outliving
from tests.support.mlflow_server import MlflowServer
from tests.support.postgres import PostgresServer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
# tests/engines needs a real vLLM: only `make test-engines` (which sets this) collects it.
collect_ignore = [] if os.environ.get("TUNELAB_ENGINES_VENV") else ["engines"]
LOG_TAIL = 8000
SESSION_START = time.time()


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real MLflow tracking server for the module's tests (a test that needs its own empty
    one defines ``mlflow`` itself)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _no_inherited_terminal_size() -> None:
    """GNU readline (which pytest loads) exports COLUMNS and LINES into the C environment, so a
    child started without ``env=`` would lay its output out for 80 columns: tests that want a
    width say it themselves (``COLUMNS=100``)."""
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.unsetenv(name)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A process a test started and never stopped is a bug in that test: name it, then end it,
    so a leak is seen in the report instead of in the next run's ports and CPU."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    left = outliving(factory.getbasetemp(), SESSION_START)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("-", f"{len(left)} processes outlived the tests that started them")
    for proc in left:
        with contextlib.suppress(psutil.Error):
            line = " ".join(proc.cmdline())[:200]
            proc.kill()  # psutil checks pid + start time first
            if reporter is not None:
                reporter.write_line(f"tunelab: killed pid {proc.pid} left by a test: {line}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report ends with the log tail of each daemon it started: CI keeps
    only the report, and a daemon's own account is what says why a wait timed out."""
    report = yield
    if report.failed and call.when in ("setup", "call"):
        for daemon in daemon_proc.STARTED:
            report.sections.append(
                (f"{daemon.name} log {daemon.log_path}", daemon.log()[-LOG_TAIL:])
            )
    if call.when == "teardown":
        daemon_proc.STARTED.clear()
    return report


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """A real agent process on a free loopback port; stopped at the end, with whatever servers
    it left running under its state dir."""
    proc = AgentProcess(tmp_path / "agent").start()
    try:
        yield proc
    finally:
        proc.terminate()
        kill_processes_under(tmp_path / "agent")  # its servers and their monitors


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session (started on first use); tests take a fresh
    database each with ``postgres.new_database()``."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


IN_PIDNS = "TUNELAB_TEST_IN_PIDNS"


def pytest_runtest_setup(item: pytest.Item) -> None:
    needs_root = item.get_closest_marker("needs_root") or item.get_closest_marker("pidns")
    if needs_root and os.geteuid() != 0:
        pytest.skip("needs root (CI runs as root)")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked ``pidns`` runs in a PID and mount namespace of its own: this process
    re-runs just that test under ``unshare --pid --fork --mount-proc`` (pid 1 there reaps
    orphans), so a regression that signals the wrong process can only hit the namespace."""
    if pyfuncitem.get_closest_marker("pidns") is None or os.environ.get(IN_PIDNS) == "1":
        return None
    basetemp = tempfile.mkdtemp(prefix="pidns-")
    try:
        result = subprocess.run(
            [
                "unshare", "--pid", "--fork", "--mount-proc",
                sys.executable, str(REPO / "tests" / "support" / "nsinit.py"),
                sys.executable, "-m", "pytest", "-q", "-x", "--no-header", "-p", "no:cacheprovider",
                f"--basetemp={basetemp}", pyfuncitem.nodeid,
            ],
            cwd=REPO, env={**os.environ, IN_PIDNS: "1"}, capture_output=True, timeout=170,
        )  # fmt: skip
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
    output = (result.stdout + result.stderr).decode(errors="replace")
    if result.returncode != 0 or " passed" not in output:
        pytest.fail(f"in its PID namespace (rc {result.returncode}):\n{output[-12000:]}")
    return True
