"""Integration: the examples of docs/*.md that cannot run here run as far as this machine can
take them, through the real console script.

- Every YAML block is a spec or part of one. A whole spec that needs a GPU host is fenced
  ``yaml {.needs-gpu}`` (a Markdown attribute; it renders as YAML) and must pass
  ``tunelab submit --dry-run`` as written; a part (``benchmark:``, ``profile:``, ``matrix:``) must
  pass it on the simulator's server.
- A spec that starts SGLang or vLLM (in the docs and in examples/) uses that engine's own flag
  names: each ``server.flags`` key, and each ``server.flags.--x`` it varies, is in the engine's
  argument list as shipped (tunelab/common/engine_flags/, read from its released wheel).
- Every ``tunelab bench`` line is accepted as written: against a port where nothing listens it
  gets as far as connecting (exit 3, "cannot reach"), past every check of its flags.

The blocks fenced ``console {.runnable}`` are run whole by tests/e2e/test_readme_runnable.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.daemon_proc import REPO
from tunelab.common import engineflags
from tunelab.controller.spec.limits import DEFAULT_LIMITS
from tunelab.controller.watches.spec import watch_from_text

TUNELAB = str(Path(sys.executable).with_name("tunelab"))
PAGES = sorted((REPO / "docs").glob("*.md"))
FENCE = re.compile(r"^(```|~~~)\s*(\S*)\s*(\{[^}]*\})?\s*$")
ENGINES = {"sglang": "sglang.launch_server", "vllm": "vllm"}
BASE = yaml.safe_load((REPO / "examples" / "demo-ablation.yaml").read_text())
DEAD = "http://127.0.0.1:1"  # nothing listens on port 1


def blocks(page: Path) -> list[tuple[int, str, str, str]]:
    """``(line, language, attributes, body)`` of each fenced block of ``page``."""
    found = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        start = index
        index += 1
        while index < len(lines) and not lines[index].startswith(match.group(1)):
            index += 1
        body = "\n".join(lines[start + 1 : index])
        found.append((start + 1, match.group(2), match.group(3) or "", body))
        index += 1
    return found


YAML_BLOCKS = [
    pytest.param(attrs, body, id=f"{page.name}:{line}")
    for page in PAGES
    for line, language, attrs, body in blocks(page)
    if language == "yaml"
]


def bench_lines() -> list[Any]:
    """Each ``tunelab bench`` command of a block that is not run whole, joined and bare."""
    found: list[Any] = []
    for page in PAGES:
        for line, _language, attrs, body in blocks(page):
            if "runnable" in attrs:
                continue
            text = re.sub(r"\\\n\s*", " ", body)
            for command in text.splitlines():
                command = command.strip().removeprefix("$ ")
                if command.startswith("tunelab bench "):
                    command = command.split(" #", 1)[0].strip()
                    found.append(pytest.param(command, id=f"{page.name}:{line}:{len(found)}"))
    return found


def dry_run(spec: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run(
        [TUNELAB, "submit", str(path), "--dry-run"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(("attrs", "body"), YAML_BLOCKS)
def test_a_docs_spec_passes_the_dry_run_as_written(attrs: str, body: str, tmp_path: Path) -> None:
    spec = yaml.safe_load(body)
    assert isinstance(spec, dict)
    if "server" in spec:
        assert ".needs-gpu" in attrs, (
            "a whole spec here runs on a GPU host: fence it yaml {.needs-gpu}"
        )
    else:  # a part of a spec: on the simulator's
        spec = {**BASE, "ablation": None, **spec}
        spec = {k: v for k, v in spec.items() if v is not None}
        if "matrix" in spec or "search" in spec or "watch" in spec:
            spec.pop("ablation", None)
    if "watch" in spec:  # `submit` refuses a watch; `watch add` checks it with this validator
        found = watch_from_text(yaml.safe_dump(spec, sort_keys=False), "docs", DEFAULT_LIMITS)
        assert found is not None and found.name == spec["name"]
        return
    result = dry_run(spec, tmp_path)
    assert result.returncode == 0, result.stderr


def engine_specs() -> list[Any]:
    found = []
    for page in PAGES:
        for line, language, _attrs, body in blocks(page):
            if language == "yaml" and "server" in (spec := yaml.safe_load(body)):
                found.append(pytest.param(spec, id=f"{page.name}:{line}"))
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for spec in yaml.safe_load_all(path.read_text()):
            if isinstance(spec, dict) and "server" in spec:
                found.append(pytest.param(spec, id=f"examples/{path.name}"))
    return found


def engine_flags(engine: str) -> set[str]:
    found = engineflags.flags_for(engine)
    assert found is not None
    return set(found[1])


def varied_flags(spec: dict[str, Any]) -> set[str]:
    """The server flags a spec sets or varies (matrix, ablation, search space)."""
    keys = set(spec["server"].get("flags") or {})
    varied: list[dict[str, Any]] = [
        spec.get("matrix") or {},
        (spec.get("search") or {}).get("space") or {},
    ]
    varied += [change for change in spec.get("ablation") or [] if isinstance(change, dict)]
    for changes in varied:
        keys |= {k.removeprefix("server.flags.") for k in changes if k.startswith("server.flags.")}
    return keys


@pytest.mark.parametrize("spec", engine_specs())
def test_a_specs_engine_flags_are_the_engines_own(spec: dict[str, Any]) -> None:
    command = " ".join(str(part) for part in spec["server"]["command"])
    engines = [name for name, module in ENGINES.items() if module in command]
    if not engines:
        return  # the simulator or another server: its own flags
    unknown = sorted(varied_flags(spec) - engine_flags(engines[0]))
    assert unknown == [], f"{engines[0]} has no {', '.join(unknown)}"


def served_name(argv: list[str], engine: str) -> str:
    """The model id vLLM or SGLang lists for an argv: --served-model-name, else the model as
    given (SGLang's --model-path, vLLM's serve argument or --model)."""
    for flag in ("--served-model-name", "--model-path", "--model"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1]
    return argv[argv.index("serve") + 1] if engine == "vllm" and "serve" in argv[:-1] else ""


def spec_argv(spec: dict[str, Any]) -> list[str]:
    argv = [str(part) for part in spec["server"]["command"]]
    for flag, value in (spec["server"].get("flags") or {}).items():
        argv += [flag] if value is True else [flag, str(value)] if value is not None else []
    return argv


@pytest.mark.parametrize("spec", engine_specs())
def test_a_specs_ready_model_is_the_name_its_engine_serves(spec: dict[str, Any]) -> None:
    """Issue 46: SGLang lists --model-path /models/GLM-5 as "/models/GLM-5", so a spec whose
    ready model is glm-5 failed at readiness after the whole model load."""
    argv = spec_argv(spec)
    engine = engineflags.engine_named(argv)
    ready = (spec["server"].get("ready") or {}).get("model", "")
    if engine and ready:
        assert served_name(argv, engine) == ready, f"{engine} serves {served_name(argv, engine)}"


def test_a_docs_server_start_serves_its_ready_model() -> None:
    checked = 0
    for page in PAGES:
        for _line, _language, _attrs, body in blocks(page):
            for command in re.sub(r"\\\n\s*", " ", body).splitlines():
                if "tunelab server start" not in command or "--ready-model" not in command:
                    continue
                words = command.split(" -- ", 1)[0].split()
                argv = command.split(" -- ", 1)[1].split()
                engine = engineflags.engine_named(argv)
                if engine:
                    ready = words[words.index("--ready-model") + 1]
                    assert served_name(argv, engine) == ready, f"{page.name}: {command}"
                    checked += 1
    assert checked >= 1  # docs/agent.md's SGLang example


def test_the_flag_check_knows_each_engines_names() -> None:
    """The check itself: SGLang's names are not vLLM's (issue 37: docs/search.md searched an
    SGLang server with --max-num-seqs)."""
    sglang, vllm = engine_flags("sglang"), engine_flags("vllm")
    assert {"--max-running-requests", "--chunked-prefill-size"} <= sglang - vllm
    assert {"--max-num-seqs", "--max-num-batched-tokens"} <= vllm - sglang
    wrong = {"server": {"command": ["python", "-m", "sglang.launch_server"], "flags": {}},
             "search": {"space": {"server.flags.--max-num-seqs": [8]}}}  # fmt: skip
    assert varied_flags(wrong) - sglang == {"--max-num-seqs"}


@pytest.fixture(scope="module")
def bench_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the files the docs' lines name: a tokenizer (trained here, no download)
    and a one-row trace."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("bench-lines")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"])
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 50, trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "conversation_trace.jsonl").write_text(
        '{"timestamp": 0, "input_length": 16, "output_length": 4, "hash_ids": [1]}\n'
    )
    return folder


@pytest.mark.parametrize("command", bench_lines())
def test_a_docs_bench_line_is_accepted_as_written(command: str, bench_folder: Path) -> None:
    argv = re.sub(r"http://127\.0\.0\.1:\d+", DEAD, command).split()[1:]
    result = subprocess.run(
        [TUNELAB, *argv], capture_output=True, text=True, timeout=60, cwd=bench_folder
    )
    assert result.returncode == 3 and "cannot reach" in result.stderr, result.stderr


def test_a_dataset_path_that_leads_out_is_refused_at_dry_run_naming_the_datasets_folder(
    tmp_path: Path,
) -> None:
    for path in ("../traces/t.jsonl", "/srv/traces/t.jsonl"):
        spec = {**BASE, "benchmark": {"dataset": {"name": "trace", "path": path}}}
        spec.pop("ablation")
        result = dry_run(spec, tmp_path)
        assert result.returncode == 2, result.stderr
        assert "benchmark.dataset.path" in result.stderr
        assert "inside the agent's datasets folder" in result.stderr
        assert "run's folder" not in result.stderr
