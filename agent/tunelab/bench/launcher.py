"""Starting the bench process and the files it shares with whoever started it.

The load generator never runs inside the caller's event loop: the agent (and the ``tunelab
bench`` CLI, so its terminal drawing cannot delay a timestamp) start ``python -m tunelab.bench``
as a child in its own session, with its output in a log file, and follow its progress file.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tunelab.bench.config import BenchConfig
from tunelab.common.pyexec import python_module_argv
from tunelab.common.spawn import spawn as start_process


@dataclass(frozen=True)
class BenchFiles:
    """The files of one bench run, all in one work directory."""

    workdir: Path

    @property
    def config(self) -> Path:
        return self.workdir / "bench-config.json"

    @property
    def progress(self) -> Path:
        return self.workdir / "bench-progress.jsonl"

    @property
    def result(self) -> Path:
        return self.workdir / "bench-result.json"

    @property
    def requests(self) -> Path:
        return self.workdir / "bench-requests.jsonl"

    @property
    def log(self) -> Path:
        return self.workdir / "bench.log"

    def log_tail(self, max_bytes: int = 2000) -> str:
        try:
            with self.log.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
                return f.read().decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return ""


def bench_argv(files: BenchFiles) -> list[str]:
    return python_module_argv(
        "tunelab.bench", "--config", str(files.config), "--workdir", str(files.workdir)
    )


def prepare(config: BenchConfig, files: BenchFiles) -> None:
    """Write the config and clear what an earlier run in the same folder left."""
    files.workdir.mkdir(parents=True, exist_ok=True)
    files.config.write_text(json.dumps(config.to_dict(), indent=1) + "\n", encoding="utf-8")
    for stale in (files.progress, files.result, files.requests):
        stale.unlink(missing_ok=True)


BENCH_ENV = {"PYTHONUNBUFFERED": "1"}


def spawn(
    config: BenchConfig, files: BenchFiles, new_session: bool = True
) -> subprocess.Popen[bytes]:
    """Write the config and start the bench process, stdout/stderr to ``bench.log``.

    ``new_session``: its own session and process group. The ``tunelab bench`` CLI passes False
    so Ctrl-C reaches it too. (The agent does not come here: it runs the same argv under a
    monitor, as it runs servers — ``tunelab.agent.runs.builtinjob``.)
    """
    prepare(config, files)
    return start_process(
        bench_argv(files), cwd=files.workdir, log=files.log, env=BENCH_ENV, new_session=new_session
    )
