"""A server's argv as the agent runs it, and why a program could not be started.

Standard library only: the per-server monitor imports it too (tests/unit/agent/test_identity.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

PYTHON_PLACEHOLDER = "{python}"  # in a spec's argv: the interpreter the agent runs on


def with_python(argv: Sequence[str], executable: str = sys.executable) -> list[str]:
    """``{python}`` elements become the agent's own interpreter, so a spec can run a module that
    is installed beside the agent without knowing where (README "Servers")."""
    return [executable if part == PYTHON_PLACEHOLDER else part for part in argv]


def not_found(program: str, cwd: str) -> str:
    """Why the program was not found, with where it was looked for."""
    if "/" not in program:
        return f"{program!r} not found on the agent's PATH (give an absolute path, or {{python}})"
    if not program.startswith("/"):
        return (
            f"{program!r} not found: a relative path is resolved against the server's working "
            f"directory {cwd} on the agent; give an absolute path, a program on the agent's "
            "PATH, or {python} for the agent's own Python"
        )
    return f"{program!r} not found on the agent"
