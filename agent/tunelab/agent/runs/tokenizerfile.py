"""A run's tokenizer (``benchmark.tokenizer``), read on the agent: prompts of exact token length.

The spec names either a ``tokenizer.json`` (or a folder holding one) relative to the agent's
datasets folder, confined there as a dataset file is (no absolute path, no ``..``, no symlink
out), or ``model``: the served model's own folder, when the server's command names a local one
(``--tokenizer P`` / ``--tokenizer-path P`` first, then the model, ``vllm serve P`` or
``--model-path P``). Nothing is looked up on a hub or downloaded. The file must load as a
tokenizer; the accepted spec then carries its resolved path, the name the spec gave and the
content's sha256, which goes into the run's provenance (prompts depend on the tokenizer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.commandjob import confined
from tunelab.agent.runs.provenance import model_path
from tunelab.agent.servers.spec import ServerSpec
from tunelab.bench.tokens import (
    SERVED_MODEL,
    TokenizerError,
    TokenPrompts,
    spec_tokenizer_problem,
)
from tunelab.common.untrusted import link_root

FIELD = "spec.benchmark.builtin.tokenizer"
TOKENIZER_FLAGS = ("--tokenizer", "--tokenizer-path")  # vLLM's, SGLang's


def served_tokenizer(argv: tuple[str, ...] | list[str]) -> str:
    """The tokenizer a server command names (``--tokenizer P``), else its model."""
    for i, arg in enumerate(argv):
        for flag in TOKENIZER_FLAGS:
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(f"{flag}="):
                return arg.split("=", 1)[1]
    return model_path(argv)


def _served_model_folder(server: ServerSpec | None) -> Path:
    if server is None:
        raise InvalidSpec(FIELD, "'model' needs the run's server, and this run has none")
    name = served_tokenizer(server.argv)
    if not name:
        raise InvalidSpec(FIELD, "'model': the server's command names no model")
    path = Path(server.cwd) / name if server.cwd and not name.startswith("/") else Path(name)
    if not path.exists():
        raise InvalidSpec(
            FIELD,
            f"'model': the served model {name!r} is not a local folder on this agent (a hub "
            "id?); put its tokenizer.json in the agent's datasets folder and name that",
        )
    return path


def resolve_tokenizer(
    builtin: dict[str, Any], datasets_dir: Path, server: ServerSpec | None
) -> dict[str, Any]:
    """``builtin`` with its tokenizer resolved, loaded once and hashed (unchanged without one)."""
    name = str(builtin.get("tokenizer", ""))
    if not name:
        return builtin
    problem = spec_tokenizer_problem(name)
    if problem is not None:
        raise InvalidSpec(FIELD, problem)
    if name == SERVED_MODEL:
        path = _served_model_folder(server)
    else:
        if not datasets_dir.is_dir():
            raise InvalidSpec(FIELD, f"this agent has no datasets folder ({datasets_dir})")
        path = confined(datasets_dir, name, FIELD)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        where = "the served model's folder" if name == SERVED_MODEL else str(datasets_dir)
        raise InvalidSpec(FIELD, f"{name!r}: no tokenizer.json in {where} ({file})")
    try:  # loaded here too, so that a file that is no tokenizer is refused at StartRun
        # of the bytes loaded: read once, bounded, a link followed only inside its folder
        digest = TokenPrompts(str(file), links_within=link_root(file.parent)).sha256
    except TokenizerError as exc:
        raise InvalidSpec(FIELD, str(exc).replace("--tokenizer ", "", 1)) from None
    return {**builtin, "tokenizer": str(file), "tokenizer_file": name, "tokenizer_sha256": digest}
