"""A benchmark that is an external command: run it in the run's directory, output to
``bench.log``, and read the JSON file it writes. Its pid + create time are kept on disk so a
restarted agent can follow (and stop) it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.record import CommandBench
from tunelab.agent.servers.process import ProcessId, stop_process_tree
from tunelab.agent.statefile import read_json, write_json_atomic

PROCESS_FILE = "command-process.json"
LOG_FILE = "bench.log"
RESULT_FILE_FIELD = "spec.benchmark.command.result_file"


class BenchFailed(RuntimeError):
    """The benchmark ended without a usable result; the message says why."""


def confined(folder: Path, name: str, field: str) -> Path:
    """``name`` as a path inside ``folder``, or InvalidSpec naming ``field``.

    The root agent deletes and writes these paths, so an absolute path, a ``..`` step or a
    symlink that leads out of the folder is refused, never resolved somewhere else.
    """
    if not name or "\0" in name:
        raise InvalidSpec(field, "must name a file in the run's folder")
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts:
        raise InvalidSpec(field, f"{name!r} must be a relative path inside the run's folder")
    root = folder.resolve()
    path = (root / relative).resolve()
    if path == root or not path.is_relative_to(root):
        raise InvalidSpec(field, f"{name!r} leads out of the run's folder")
    return path


class CommandJob:
    def __init__(self, bench: CommandBench, workdir: Path, substitutions: dict[str, str]) -> None:
        self._bench = bench
        self._workdir = workdir
        self._subs = substitutions
        self._popen: subprocess.Popen[bytes] | None = None
        self._identity: ProcessId | None = None

    @property
    def result_path(self) -> Path:
        return confined(self._workdir, self._substitute(self._bench.result_file), RESULT_FILE_FIELD)

    def _substitute(self, text: str) -> str:
        for key, value in self._subs.items():
            text = text.replace("{" + key + "}", value)
        return text

    def start(self) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.result_path.unlink(missing_ok=True)
        argv = [self._substitute(a) for a in self._bench.argv]
        env = dict(os.environ)
        env.update({k: self._substitute(v) for k, v in self._bench.env.items()})
        with (self._workdir / LOG_FILE).open("ab") as log:
            try:
                self._popen = subprocess.Popen(
                    argv,
                    cwd=self._workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise BenchFailed(f"cannot start {argv[0]!r}: {exc.strerror}") from exc
        self._identity = ProcessId.of(self._popen.pid) or ProcessId(self._popen.pid, 0.0)
        write_json_atomic(
            self._workdir / PROCESS_FILE, [self._identity.pid, self._identity.create_time]
        )

    def attach(self) -> bool:
        """Follow a command started by an earlier agent; False when none was started."""
        try:
            pid, create_time = read_json(self._workdir / PROCESS_FILE)
        except (OSError, ValueError):
            return False
        self._identity = ProcessId(int(pid), float(create_time))
        return True

    def progress(self) -> dict[str, Any] | None:
        return None  # an external tool reports nothing the agent could read

    def finished(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is not None
        return self._identity is None or not self._identity.alive()

    def result(self) -> dict[str, Any]:
        code = self._popen.returncode if self._popen is not None else None
        if code not in (0, None):
            raise BenchFailed(f"benchmark command exited with {code}; see its log (stream bench)")
        try:
            data = json.loads(self.result_path.read_text())
        except FileNotFoundError:
            raise BenchFailed(f"benchmark command wrote no {self.result_path.name}") from None
        except ValueError as exc:
            raise BenchFailed(f"{self.result_path.name} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            return {"result": data}
        return data

    def stop(self, grace: float) -> None:
        if self._identity is None:
            return
        reap = self._popen.poll if self._popen is not None else (lambda: None)
        if self._identity.alive():
            stop_process_tree(self._identity, (), grace, reap=reap)
