"""The built-in load generator as a run's benchmark: ``python -m tunelab.bench`` in its own
process and session, followed through its progress and result files (so a restarted agent can
pick it up again from the files and the recorded pid + create time)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tunelab.agent.runs.commandjob import BenchFailed
from tunelab.agent.servers.process import ProcessId, stop_process_tree
from tunelab.agent.statefile import read_json, write_json_atomic
from tunelab.bench.config import BenchConfig
from tunelab.bench.launcher import BenchFiles, spawn
from tunelab.bench.progress import ProgressReader


class BuiltinJob:
    def __init__(self, config: dict[str, Any], workdir: Path, label: str) -> None:
        self._config = BenchConfig.from_dict({**config, "label": label})
        self._files = BenchFiles(workdir)
        self._reader = ProgressReader(self._files.progress)
        self._popen: Any = None
        self._identity: ProcessId | None = None

    def start(self) -> None:
        self._popen = spawn(self._config, self._files)
        self._identity = ProcessId.of(self._popen.pid) or ProcessId(self._popen.pid, 0.0)
        write_json_atomic(self._files.process, [self._identity.pid, self._identity.create_time])

    def attach(self) -> bool:
        try:
            pid, create_time = read_json(self._files.process)
        except (OSError, ValueError):
            return False
        self._identity = ProcessId(int(pid), float(create_time))
        return True

    def progress(self) -> dict[str, Any] | None:
        latest = self._reader.poll().latest
        return asdict(latest) if latest is not None else None

    def finished(self) -> bool:
        if self._popen is not None:
            return bool(self._popen.poll() is not None)
        return self._identity is None or not self._identity.alive()

    def result(self) -> dict[str, Any]:
        state = self._reader.poll()
        try:
            document: dict[str, Any] = json.loads(self._files.result.read_text())
        except FileNotFoundError:
            tail = self._files.log_tail(600)
            raise BenchFailed(
                f"the load generator wrote no result: {state.error or tail}"
            ) from None
        except ValueError as exc:
            raise BenchFailed(f"the result file is not JSON: {exc}") from None
        if state.error or document.get("status") != "completed":
            raise BenchFailed(
                f"the load generator stopped: {state.error or document.get('status')}"
            )
        return document

    def stop(self, grace: float) -> None:
        if self._identity is not None and self._identity.alive():
            reap = self._popen.poll if self._popen is not None else (lambda: None)
            stop_process_tree(self._identity, (), grace, reap=reap)
