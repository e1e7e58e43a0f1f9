"""The built-in load generator as a run's benchmark: ``python -m tunelab.bench`` under a monitor
of its own (:mod:`monitoredjob`, as servers run), followed through its progress and result files,
so a restarted agent picks it up again through the monitor's socket and the files."""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tunelab.agent.runs.commandjob import MAX_RESULT_BYTES, STOP_GRACE, BenchFailed
from tunelab.agent.runs.monitoredjob import JobFailed, MonitoredJob
from tunelab.agent.statefile import read_json
from tunelab.bench.config import BenchConfig
from tunelab.bench.launcher import BENCH_ENV, BenchFiles, bench_argv, prepare
from tunelab.bench.progress import ProgressReader

PROCESS_FILE = "bench-process.json"


class BuiltinJob:
    def __init__(self, config: dict[str, Any], workdir: Path, label: str) -> None:
        self._config = BenchConfig.from_dict({**config, "label": label})
        self._files = BenchFiles(workdir)
        self._reader = ProgressReader(self._files.progress)
        self._job = MonitoredJob("bench", workdir, PROCESS_FILE)

    def start(self) -> None:
        prepare(self._config, self._files)
        try:
            self._job.start(
                bench_argv(self._files),
                cwd=self._files.workdir,
                log_path=self._files.log,
                env=BENCH_ENV,
                field="spec.benchmark.builtin",
                stop_grace=STOP_GRACE,
            )
        except JobFailed as exc:
            raise BenchFailed(str(exc)) from exc

    def attach(self) -> bool:
        return self._job.attach()

    def progress(self) -> dict[str, Any] | None:
        latest = self._reader.poll().latest
        return asdict(latest) if latest is not None else None

    def finished(self) -> bool:
        return self._job.finished()

    def result(self) -> dict[str, Any]:
        state = self._reader.poll()
        if self._job.vanished:
            raise BenchFailed(f"the load generator: {self._job.vanished}")
        try:
            document: dict[str, Any] = read_json(self._files.result, MAX_RESULT_BYTES)
        except FileNotFoundError:
            tail = self._files.log_tail(600)
            raise BenchFailed(
                f"the load generator wrote no result: {state.error or tail}"
            ) from None
        except OSError as exc:  # ELOOP: a symlink where the result goes
            raise BenchFailed(f"the result file not read: {exc.strerror}") from None
        except ValueError as exc:
            raise BenchFailed(f"the result file is not JSON: {exc}") from None
        if state.error or document.get("status") != "completed":
            raise BenchFailed(
                f"the load generator stopped: {state.error or document.get('status')}"
            )
        return document

    def stop(self, grace: float, closing: threading.Event) -> None:
        self._job.stop(grace, closing)
