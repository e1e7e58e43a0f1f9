"""A benchmark that is an external command: run it under a monitor of its own in the run's
directory (:mod:`monitoredjob`), output to ``bench.log``, and read the JSON file it writes. A
restarted agent re-attaches to it through the monitor's socket."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.monitoredjob import JobFailed, MonitoredJob
from tunelab.agent.runs.record import CommandBench
from tunelab.agent.statefile import read_json

PROCESS_FILE = "command-process.json"
LOG_FILE = "bench.log"
RESULT_FILE_FIELD = "spec.benchmark.command.result_file"
# a result file is read whole into memory: a benchmark's (~100 KB for a 4-point sweep) is far below
MAX_RESULT_BYTES = 16 * 1024 * 1024
STOP_GRACE = 10.0  # what the monitor grants when it is itself told to stop (SIGTERM)


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
        self._job = MonitoredJob("bench", workdir, PROCESS_FILE)

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
        try:
            self._job.start(
                [self._substitute(a) for a in self._bench.argv],
                cwd=self._workdir,
                log_path=self._workdir / LOG_FILE,
                env={k: self._substitute(v) for k, v in self._bench.env.items()},
                field="spec.benchmark.command",
                stop_grace=STOP_GRACE,
            )
        except JobFailed as exc:
            raise BenchFailed(str(exc)) from exc

    def attach(self) -> bool:
        """Follow a command started by an earlier agent; False when none was started."""
        return self._job.attach()

    def progress(self) -> dict[str, Any] | None:
        return None  # an external tool reports nothing the agent could read

    def finished(self) -> bool:
        return self._job.finished()

    def result(self) -> dict[str, Any]:
        if self._job.vanished:
            raise BenchFailed(f"benchmark command: {self._job.vanished}")
        code = self._job.exit_code
        if code not in (0, None):
            raise BenchFailed(f"benchmark command exited with {code}; see its log (stream bench)")
        try:
            data = read_json(self.result_path, MAX_RESULT_BYTES)
        except FileNotFoundError:
            raise BenchFailed(f"benchmark command wrote no {self.result_path.name}") from None
        except OSError as exc:  # ELOOP: a symlink planted where the result goes
            raise BenchFailed(f"{self.result_path.name} not read: {exc.strerror}") from None
        except ValueError as exc:
            raise BenchFailed(f"{self.result_path.name} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            return {"result": data}
        return data

    def stop(self, grace: float, closing: threading.Event) -> None:
        self._job.stop(grace, closing)
