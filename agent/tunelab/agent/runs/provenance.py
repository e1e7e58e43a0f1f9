"""What exactly ran, recorded with every run before its server starts (README, "Provenance"):
argv and env (secrets redacted), engine and version, model path and config hash, the GPUs with
their driver, CUDA version, clocks and power limit at start, tunelab's version, and the
benchmark's seed and dataset hash. Two runs that differ in something nobody varied (a driver
update, another GPU model, a lowered power limit) can then be told apart.

Nothing here spawns a process: the engine's version is read from the package metadata of the
Python environment its argv runs in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from importlib import metadata
from pathlib import Path
from typing import Any

from tunelab.agent.gpu import GpuBackend, GpuError
from tunelab.agent.runs.modelfiles import describe_model
from tunelab.agent.runs.record import RunSpec
from tunelab.agent.servers.spec import ServerSpec
from tunelab.bench.config import BenchConfig
from tunelab.bench.simulator.upgrade import Upgrade, read_upgrade
from tunelab.common import __version__
from tunelab.common.redaction import REDACTED, Redactor
from tunelab.common.sanitize import printable
from tunelab.common.untrusted import read_untrusted

__all__ = ["REDACTED", "RunProvenance", "redact_argv", "redact_env"]

MODEL_FLAGS = ("--model-path", "--model", "--model-name-or-path")
# (what argv contains, engine name, distribution whose version is the engine's)
ENGINES = (
    ("sglang", "sglang", "sglang"),
    ("vllm", "vllm", "vllm"),
    ("tensorrt_llm", "tensorrt-llm", "tensorrt-llm"),
    ("lmdeploy", "lmdeploy", "lmdeploy"),
    ("tunelab.bench.simulator", "tunelab-simulator", "tunelab"),
)
SIMULATOR = "tunelab-simulator"
GPU_FIELDS = (
    "name",
    "uuid",
    "pci_bus_id",
    "memory_total_bytes",
    "power_limit_watts",
    "power_default_limit_watts",
    "sm_clock_hertz",
    "sm_clock_max_hertz",
    "memory_clock_hertz",
    "memory_clock_max_hertz",
    "vbios_version",
)
BENCH_DATA_KEYS = (
    "api",
    "input_len",
    "output_len",
    "range_ratio",
    "seed",
    "requests",
    "duration_seconds",
    "warmup",
    "preset",
    "ignore_eos",
    "temperature",
    # the dataset (issue 26): its name, parameters and, for a file, its content hash
    "dataset",
    "input_dist",
    "output_dist",
    "input_sigma",
    "output_sigma",
    "output_range_ratio",
    "prefix_len",
    "prefix_groups",
    "turns",
    "think_time_s",
    "file_format",
    "file_output_len",
    "file_filter",
    "trace_block_size",
    "trace_sec_multiplier",
    "trace_timed",
    "trace_long_schedule",
    "dataset_sha256",
    "dataset_file",
    # prompts are made with the tokenizer (issue 35): which one, by content
    "tokenizer_file",
    "tokenizer_sha256",
)
DATASET_KEYS = BENCH_DATA_KEYS[BENCH_DATA_KEYS.index("dataset") :]
_DEFAULTS = {f.name: f.default for f in fields(BenchConfig)}
SHEBANG_BYTES = 512
METADATA_HEAD = 64 * 1024  # Version: is among the first lines of a METADATA file
MAX_VERSION = 64  # characters of an engine version kept (tunelab.common.sanitize)
MAX_SOURCE = 512


def process_redactor(
    argv: Sequence[str],
    env: Mapping[str, str],
    more_argv: Sequence[str] = (),
    names: Sequence[str] = (),
) -> Redactor:
    """A redactor that knows every secret a process is given (tunelab.common.redaction)."""
    return Redactor.for_process(argv, env, more_argv, names)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return process_redactor([], env).env(env)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``--api-key X`` and ``--hf-token=X`` keep the flag and lose the value."""
    return process_redactor(argv, {}).argv(argv)


def model_path(argv: Sequence[str]) -> str:
    """The model a server command names: ``--model-path P``, ``--model=P``, ``vllm serve P``."""
    for i, arg in enumerate(argv):
        for flag in MODEL_FLAGS:
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(f"{flag}="):
                return arg.split("=", 1)[1]
        if arg == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return argv[i + 1]
    return ""


def _interpreter(argv0: str, path_env: str) -> Path | None:
    """The Python that runs ``argv0``: itself, or the one in a console script's shebang."""
    found = shutil.which(argv0, path=path_env) if "/" not in argv0 else argv0
    if not found:
        return None
    program = Path(found)
    if program.name.startswith("python"):
        return program
    try:
        with program.open("rb") as handle:
            first = handle.read(SHEBANG_BYTES).split(b"\n", 1)[0]
    except OSError:
        return None
    if first.startswith(b"#!") and b"python" in first:
        return Path(first[2:].decode(errors="replace").split()[0])
    return None


def _site_dirs(interpreter: Path) -> list[str]:
    root = interpreter.parent.parent  # <venv>/bin/python -> <venv>; /usr/bin/python3 -> /usr
    dirs = [str(p) for p in sorted(root.glob("lib/python3*/site-packages"))]
    dirs += [str(p) for p in sorted(root.glob("lib/python3*/dist-packages"))]
    dirs += [str(p) for p in sorted(root.glob("local/lib/python3*/dist-packages"))]
    return dirs + [str(p) for p in (root / "lib/python3/dist-packages",) if p.is_dir()]


def engine_version(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    joined = " ".join(argv)
    engine = next(((name, dist) for needle, name, dist in ENGINES if needle in joined), None)
    name = engine[0] if engine else Path(argv[0]).name if argv else ""
    out: dict[str, Any] = {"name": name, "version": None, "version_source": None}
    if engine is None:
        return out
    if engine[0] == SIMULATOR:
        speed_file = flag_value(argv, "--speed-file")
        upgrade = _simulated_upgrade(speed_file)
        if upgrade is not None and upgrade.version:
            out["version"] = upgrade.version
            out["version_source"] = f"the simulator's --speed-file ({speed_file})"
            return out
    path_env = env.get("PATH", os.environ.get("PATH", ""))
    interpreter = _interpreter(argv[0], path_env) if argv else None
    if interpreter is not None:
        version = _metadata_version(_site_dirs(interpreter), engine[1])
        if version is not None:
            out["version"] = version
            out["version_source"] = printable(f"package metadata ({interpreter})", MAX_SOURCE)
            return out
    try:
        out["version"] = printable(metadata.version(engine[1]), MAX_VERSION)
        out["version_source"] = "package metadata (the agent's Python)"
    except metadata.PackageNotFoundError:
        pass
    return out


def _metadata_version(dirs: Sequence[str], dist: str) -> str | None:
    """``Version:`` of ``dist``'s ``METADATA`` in the first of ``dirs`` that has it, read as an
    untrusted file (the server's environment is not ours: a FIFO must not block the run, a
    hostile version must not reach a terminal or Slack raw) and made printable, at most
    ``MAX_VERSION`` characters."""
    for found in metadata.distributions(name=dist, path=list(dirs)) if dirs else []:
        folder = getattr(found, "_path", None)  # the .dist-info folder (no file read yet)
        if folder is None:
            continue
        try:
            raw = read_untrusted(Path(folder) / "METADATA", METADATA_HEAD, whole=False, seconds=2)
        except OSError:
            return None
        head = raw.decode("utf-8", errors="replace").split("\n\n", 1)[0]
        for line in head.splitlines():
            if line.lower().startswith("version:"):
                return printable(line.split(":", 1)[1].strip(), MAX_VERSION)
        return None
    return None


def flag_value(argv: Sequence[str], flag: str) -> str:
    """The value of ``flag V`` or ``flag=V`` in ``argv`` ("" when absent)."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return str(argv[i + 1])
        if arg.startswith(flag + "="):
            return str(arg[len(flag) + 1 :])
    return ""


def _simulated_upgrade(path: str) -> Upgrade | None:
    """The simulator's upgrade file as it will read it at start (None: unreadable or refused,
    the start itself then says why)."""
    try:
        return read_upgrade(path)
    except (OSError, SystemExit):
        return None


def _gpu_indices(env: Mapping[str, str], count: int) -> list[int]:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    picked = [int(p) for p in visible.split(",") if p.strip().isdigit()]
    return [i for i in picked if i < count]


def gpu_state(
    gpu: GpuBackend, env: Mapping[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(driver and CUDA versions, each GPU the server will see) read now, through ``gpu``."""
    if not gpu.available():
        return {"unavailable": gpu.unavailable_reason()}, []
    try:
        system = dict(gpu.system())
        devices = []
        for index in _gpu_indices(env, gpu.device_count()):
            devices.append({"index": index, **{f: gpu.read(index, f) for f in GPU_FIELDS}})
    except GpuError as exc:
        return {"error": str(exc)}, []
    return system, devices


def benchmark_provenance(spec: RunSpec, redactor: Redactor | None = None) -> dict[str, Any]:
    """Seed and dataset hash: the built-in generator synthesises its prompts from the settings
    hashed here, so equal hashes mean equal requests; a command benchmark hashes its argv."""
    if spec.builtin is not None:
        # a dataset setting at its default is left out, so a random run hashes as it did
        # before datasets existed (runs recorded then stay comparable)
        shaping = {
            k: spec.builtin.get(k)
            for k in BENCH_DATA_KEYS
            if k not in DATASET_KEYS or spec.builtin.get(k, _DEFAULTS.get(k)) != _DEFAULTS.get(k)
        }
        text = json.dumps(shaping, sort_keys=True, default=str)
        dataset = {k: spec.builtin[k] for k in DATASET_KEYS if k in spec.builtin}
        return {
            "kind": "builtin",
            "seed": spec.builtin.get("seed"),
            "dataset_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "dataset": {
                "name": dataset.pop("dataset", "random"),
                "file": dataset.pop("dataset_file", None),
                "content_sha256": dataset.pop("dataset_sha256", "") or None,
                "parameters": dataset,
            },
        }
    argv = list(spec.command.argv) if spec.command else []
    text = json.dumps(argv)
    return {
        "kind": "command",
        "seed": None,
        "argv": (redactor or process_redactor(argv, {})).argv(argv),
        "dataset_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def _under(path: str, cwd: str) -> str:
    return str(Path(cwd) / path) if path and cwd and not path.startswith("/") else path


class RunProvenance:
    """The executor's hook: ``provenance(run_spec, server_spec)`` -> a JSON-able record."""

    def __init__(self, gpu: GpuBackend, clock: Callable[[], float]) -> None:
        self._gpu = gpu
        self._clock = clock

    def __call__(self, spec: RunSpec, server: ServerSpec | None) -> dict[str, Any]:
        argv = list(server.argv) if server else []
        env = dict(server.env) if server else {}
        bench_argv = list(spec.command.argv) if spec.command else []
        bench_env = dict(spec.command.env) if spec.command else {}
        names = server.redact if server else ()
        redactor = process_redactor(argv, {**env, **bench_env}, bench_argv, names)
        system, gpus = gpu_state(self._gpu, env)
        return {
            "recorded_at": self._clock(),
            "argv": redactor.argv(argv),
            "env": redactor.env(env),
            "cwd": server.cwd if server else "",
            "engine": engine_version(argv, env) if argv else {},
            "model": describe_model(_under(model_path(argv), server.cwd if server else "")),
            "system": system,
            "gpus": gpus,
            "tunelab_version": __version__,
            "benchmark": benchmark_provenance(spec, redactor),
        }
