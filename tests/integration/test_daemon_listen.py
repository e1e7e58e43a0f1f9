"""Integration: a port in use, for either daemon's gRPC or /metrics listener (issue 36.6).

Before: ``--listen`` on a taken port printed gRPC's C-core log line (``Failed to add port to
server``) and ``cannot listen on ...: address in use or not available`` (exit 3), and a taken
``--metrics-listen`` said ``Address already in use`` with exit 3. Now each is one line of ours
naming the address and saying "in use", exit 2, through the real console scripts."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.fixture
def taken() -> Iterator[str]:
    """A loopback port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield f"127.0.0.1:{holder.getsockname()[1]}"


def _agent(tmp_path: Path, *flags: str) -> list[str]:
    state = tmp_path / "agent-state"
    return [str(BIN / "tunelab-agent"), "serve", "--state-dir", str(state), *flags]


def _controller(tmp_path: Path, *flags: str) -> list[str]:
    db = tmp_path / "controller.db"
    return [str(BIN / "tunelab"), "controller", "serve", "--db", str(db), *flags]


@pytest.mark.parametrize(
    ("daemon", "flag"),
    [("agent", "--listen"), ("agent", "--metrics-listen"),
     ("controller", "--listen"), ("controller", "--metrics-listen")],
)  # fmt: skip
def test_a_port_in_use_is_one_line_naming_it_and_exit_2(
    tmp_path: Path, taken: str, daemon: str, flag: str
) -> None:
    flags = [flag, taken] if flag == "--listen" else ["--listen", "127.0.0.1:0", flag, taken]
    argv = (_agent if daemon == "agent" else _controller)(tmp_path, *flags)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    # stderr holds the daemon's JSON log lines (its config) and, besides them, one line
    lines = [x for x in done.stderr.splitlines() if not x.startswith("{")]
    assert len(lines) == 1, done.stderr  # no C-core line, no traceback
    [line] = lines
    assert line.startswith(f"tunelab{'-agent' if daemon == 'agent' else ' controller'}: ")
    assert taken in line and "in use" in line, line
    assert ".cc:" not in done.stderr and "Traceback" not in done.stderr
