"""A run's dataset file, read on the agent from its datasets folder (``datasets_dir``).

The spec names the file relative to that folder; like a command benchmark's ``result_file``
it is confined there (no absolute path, no ``..``, no symlink out), it must be a regular file
with at least one usable line (a timed trace: a schedule of at most a day unless asked for), and
when the spec gives a sha256 the content must have it. The
accepted spec then carries the resolved path and the content's hash, which goes into the run's
provenance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.commandjob import confined
from tunelab.bench import promptfiles
from tunelab.bench.config import BenchConfig
from tunelab.bench.datasets import Dataset

PATH_FIELD = "spec.benchmark.builtin.dataset.path"
SHA_FIELD = "spec.benchmark.builtin.dataset.sha256"


def resolve_dataset(builtin: dict[str, Any], datasets_dir: Path) -> dict[str, Any]:
    """``builtin`` with its dataset file confined, checked and hashed (unchanged without one)."""
    name = builtin.get("dataset_path", "")
    if not name:
        return builtin
    if not datasets_dir.is_dir():
        raise InvalidSpec(PATH_FIELD, f"this agent has no datasets folder ({datasets_dir})")
    path = confined(datasets_dir, name, PATH_FIELD)
    if not path.is_file():
        raise InvalidSpec(PATH_FIELD, f"{name!r} is not a file in {datasets_dir}")
    fmt = "trace" if builtin.get("dataset") == "trace" else str(builtin.get("file_format", "auto"))
    try:  # parsed here too, so that a file with no usable line is refused at StartRun
        if fmt == "trace":  # and a trace's schedule over a day, before the server starts
            # the settings that make the schedule (the URL is no part of it, may be unset)
            settings = {"url": "http://127.0.0.1", **builtin, "dataset_path": str(path)}
            config = BenchConfig.from_dict(settings)
            actual = Dataset(config, None).sha256
        else:
            actual = promptfiles.load(str(path), fmt).sha256
    except promptfiles.DatasetFileError as exc:
        raise InvalidSpec(PATH_FIELD, str(exc).replace(str(path), repr(name), 1)) from None
    expected = str(builtin.get("dataset_sha256", "")).lower()
    if expected and expected != actual:
        raise InvalidSpec(SHA_FIELD, f"{name!r} has sha256 {actual}, not {expected}")
    return {**builtin, "dataset_path": str(path), "dataset_sha256": actual, "dataset_file": name}
