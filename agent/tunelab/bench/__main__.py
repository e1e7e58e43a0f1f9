"""The bench process: ``python -m tunelab.bench --config FILE --workdir DIR``.

Runs the sweep described by the config JSON and writes, in DIR, the progress JSON lines, the
per-request JSON lines and the result document. Exit status: 0 done, 1 failed or stopped (a
partial result with the finished points is still written), 2 the config is invalid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tunelab.bench.chattemplate import ChatTemplateError
from tunelab.bench.config import BenchConfig, BenchConfigError
from tunelab.bench.fdlimit import raise_fd_limit
from tunelab.bench.launcher import BenchFiles
from tunelab.bench.models import ModelLookupError, first_model_id
from tunelab.bench.progress import ProgressWriter
from tunelab.bench.promptfiles import DatasetFileError
from tunelab.bench.records import write_result
from tunelab.bench.sweep import Sweep
from tunelab.bench.tokens import TokenizerError
from tunelab.common.boundedhttp import HttpFailure


async def _run(sweep: Sweep, files: BenchFiles, progress: ProgressWriter) -> int:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    stopping: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        if stopping:  # a Ctrl-C comes from the terminal and again from `tunelab bench`: once
            return
        stopping.append(sig.name)
        if main is not None:
            main.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    points: list[dict[str, Any]] = []
    try:
        await sweep.run(points)
    except asyncio.CancelledError:
        if not stopping:
            raise
    status = f"stopped by {stopping[0]}" if stopping else "completed"
    write_result(files.result, sweep.document(points, status))
    if stopping:
        progress.event("failed", error=f"stopped by {stopping[0]} after {len(points)} points")
        return 1
    progress.event("finished", points=len(points))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tunelab.bench", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="BenchConfig as JSON")
    parser.add_argument("--workdir", type=Path, required=True, help="where the outputs go")
    args = parser.parse_args(argv)
    files = BenchFiles(args.workdir)
    progress = ProgressWriter(files.progress)
    try:
        config = BenchConfig.from_dict(json.loads(args.config.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as exc:
        message = str(exc) if isinstance(exc, BenchConfigError) else f"bad config: {exc}"
        progress.event("failed", error=message)
        print(f"tunelab.bench: {message}", file=sys.stderr)
        return 2
    try:
        if not config.model:
            config = replace(config, model=first_model_id(config.url))
        sweep = Sweep(config, progress, None)
    except (
        ModelLookupError,
        TokenizerError,
        DatasetFileError,
        ChatTemplateError,
        HttpFailure,
    ) as exc:
        progress.event("failed", error=str(exc))
        print(f"tunelab.bench: {exc}", file=sys.stderr)
        return 2
    raise_fd_limit()
    print(f"tunelab.bench: {len(config.points())} points against {config.endpoint}", flush=True)
    with files.requests.open("w", encoding="utf-8") as requests_out:
        sweep.requests_out = requests_out
        try:
            code = asyncio.run(_run(sweep, files, progress))
        except Exception as exc:  # an unexpected bug: report it in the progress file, then die
            progress.event("failed", error=f"{type(exc).__name__}: {exc}")
            raise
    progress.close()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
