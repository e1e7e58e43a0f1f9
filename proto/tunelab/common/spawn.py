"""The one place tunelab starts a process (STYLE.md 6): the agent's monitors, the servers and
benchmark jobs they run, the load generator, the simulator, the CUDA probe and the demo's daemons.

Standard library only, and in ``tunelab.common`` rather than ``tunelab.agent.servers``: the load
generator's launcher and the simulator (``tunelab.bench``) and the demo (``tunelab.controller``)
start processes too, and neither may import the agent (DESIGN.md, import rules).

Every child gets an argv list (never a shell), closed fds, its own session unless the caller asks
to share the terminal's (the ``tunelab bench`` CLI, so Ctrl-C reaches it), stdin from /dev/null
and stdout/stderr appended to a log file, never a pipe that someone must drain. The one exception
is the monitor's handshake: ``handshake=True`` gives the child a stdin and a stdout pipe (the
launch document in, one answer line out) while stderr still goes to the log.

A program or working directory that does not exist is refused as :class:`SpawnRefused`, naming
the field the caller calls it by, so an RPC can answer INVALID_ARGUMENT with that field.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

PYTHON_PLACEHOLDER = "{python}"  # in a spec's argv: the interpreter tunelab runs on


class SpawnRefused(Exception):
    """Nothing was started; ``field`` names what was wrong (``spec.argv[0]``, ``spec.cwd``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def with_python(argv: Sequence[str], executable: str = sys.executable) -> list[str]:
    """``{python}`` elements become tunelab's own interpreter, so a spec can run a module that is
    installed beside the agent without knowing where."""
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


def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    log: Path,
    env: Mapping[str, str] | None = None,
    new_session: bool = True,
    handshake: bool = False,
    pass_fds: Sequence[int] = (),
    truncate_log: bool = False,
    field: str = "spec",
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (``{python}`` elements filled in) in ``cwd``; output appended to ``log``.

    ``env`` adds to (and overrides) this process's environment. Raises :class:`SpawnRefused`
    with ``{field}.argv[0]`` or ``{field}.cwd`` when the program or folder is missing or not
    usable; any other OSError (EMFILE, ENOMEM) propagates as it is.
    """
    argv = with_python(argv)
    if not argv:
        raise SpawnRefused(f"{field}.argv", "must not be empty")
    full_env = dict(os.environ)
    full_env.update(env or {})
    pipe = subprocess.PIPE if handshake else subprocess.DEVNULL
    with log.open("wb" if truncate_log else "ab") as out:
        try:
            return subprocess.Popen(
                argv,
                stdin=pipe,
                stdout=subprocess.PIPE if handshake else out,
                stderr=out if handshake else subprocess.STDOUT,
                cwd=cwd,
                env=full_env,
                start_new_session=new_session,
                close_fds=True,
                pass_fds=tuple(pass_fds),
            )
        except FileNotFoundError as exc:
            if not cwd.is_dir():
                raise SpawnRefused(f"{field}.cwd", f"{cwd} is not a directory") from exc
            raise SpawnRefused(f"{field}.argv[0]", not_found(argv[0], str(cwd))) from exc
        except PermissionError as exc:
            raise SpawnRefused(f"{field}.argv[0]", f"{argv[0]!r} is not executable") from exc
        except NotADirectoryError as exc:
            raise SpawnRefused(f"{field}.cwd", f"{cwd} is not a directory") from exc
