"""The one ``tunelab`` namespace: pyproject's package map matches the tree, and the layers'
import contracts hold (DESIGN.md, "Import rules, checked by the build")."""

from __future__ import annotations

import ast
import shutil
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# (importer, forbidden): no module under the first may import, directly or through other
# tunelab modules, any module under the second.
CONTRACTS: list[tuple[str, tuple[str, ...]]] = [
    ("tunelab.v1", ("tunelab.common", "tunelab.agent", "tunelab.bench", "tunelab.controller")),
    ("tunelab.v1", ("tunelab.cli",)),
    ("tunelab.common", ("tunelab.agent", "tunelab.controller", "tunelab.cli", "tunelab.bench")),
    ("tunelab.bench", ("tunelab.agent", "tunelab.controller", "tunelab.cli")),
    ("tunelab.analysis", ("tunelab.controller", "tunelab.agent", "tunelab.cli")),
    ("tunelab.controller", ("tunelab.agent",)),
    ("tunelab.agent", ("tunelab.controller", "tunelab.cli")),
    ("tunelab.cli", ("tunelab.agent",)),  # the laptop CLI speaks to agents through the stubs only
]
# the CLI runs on a laptop: it starts the daemon and checks specs, nothing more of the controller
MAX_CLI_MODULES_IMPORTING_CONTROLLER = 2


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _package_dirs(repo: Path) -> dict[str, Path]:
    setuptools = _pyproject()["tool"]["setuptools"]
    return {name: repo / path for name, path in setuptools["package-dir"].items()}


def modules(repo: Path) -> dict[str, Path]:
    """Every module of the namespace, by import name, as the package map lays it out."""
    found: dict[str, Path] = {}
    for root_name, root in _package_dirs(repo).items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([root_name, *parts])] = path
    return found


def imports_of(path: Path, module: str) -> set[str]:
    """Names of tunelab modules (or their members) this module imports, at any depth of code."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {name for name in out if name == "tunelab" or name.startswith("tunelab.")}


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def cli_modules_importing_controller(repo: Path) -> list[str]:
    """The CLI modules that import ``tunelab.controller`` themselves (at any depth of code)."""
    return sorted(
        module
        for module, path in modules(repo).items()
        if _under(module, ["tunelab.cli"])
        and any(_under(name, ["tunelab.controller"]) for name in imports_of(path, module))
    )


def violations(repo: Path) -> list[str]:
    """Each contract broken, with the import chain that breaks it."""
    mods = modules(repo)
    graph = {m: {i for i in imports_of(p, m) if i in mods} for m, p in mods.items()}
    broken: list[str] = []
    for importer, forbidden in [*CONTRACTS, *AGENT_LAYERS]:
        for start in sorted(m for m in mods if _under(m, [importer])):
            chain = {start: [start]}
            todo = [start]
            while todo:
                current = todo.pop()
                for nxt in sorted(graph[current]):
                    if nxt in chain:
                        continue
                    chain[nxt] = [*chain[current], nxt]
                    if _under(nxt, forbidden):
                        path = " -> ".join(chain[nxt])
                        broken.append(f"{importer} must not import {nxt}: {path}")
                    else:
                        todo.append(nxt)
    return broken


def test_package_list_matches_the_tree() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = {
        name
        for name, path in modules(REPO).items()
        if path.name == "__init__.py" and "__pycache__" not in path.parts
    }
    # a folder of data files only (the store's migrations/*.sql) is listed as a package so that
    # setuptools ships it without its 40-line "Package would be ignored" warning; it is named
    # in package-data and holds no Python (the code that applies it is store/schema.py)
    data_only = set(setuptools.get("package-data", {})) - on_disk
    for name in data_only:
        assert name in listed, name
    on_disk |= data_only
    assert listed == on_disk, f"add to pyproject: {on_disk - listed}; remove: {listed - on_disk}"


def test_each_root_is_the_folder_of_its_import_name() -> None:
    """mypy and ruff resolve ``tunelab.x`` from the folders, so folder == import name."""
    for name, path in _package_dirs(REPO).items():
        assert path.parts[-2:] == tuple(name.split(".")), (name, path)
        assert not (path.parent / "__init__.py").exists(), "tunelab must stay a namespace package"


def test_layer_contracts_hold() -> None:
    assert violations(REPO) == []


def test_the_cli_imports_the_controller_in_two_modules_at_most() -> None:
    """Starting the daemon (``controller_cmd``) and checking a spec as the controller would
    (``experiments_cmd``, ``submit --dry-run``); the rest reads through the RPCs and
    ``tunelab.analysis``."""
    found = cli_modules_importing_controller(REPO)
    assert len(found) <= MAX_CLI_MODULES_IMPORTING_CONTROLLER, found


def test_a_third_cli_module_importing_the_controller_is_caught(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    for folder in ("proto", "agent", "controller"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = cli_modules_importing_controller(copy)
    path = copy / "controller/tunelab/cli/show_view.py"
    line = "from tunelab.controller.spec.render import server_argv"
    path.write_text(path.read_text() + f"\n\ndef _sneaky() -> None:\n    {line}\n")
    after = cli_modules_importing_controller(copy)
    assert after == sorted([*before, "tunelab.cli.show_view"]), after
    assert len(after) > MAX_CLI_MODULES_IMPORTING_CONTROLLER, after


@pytest.mark.parametrize(
    ("victim", "line", "contract"),
    [
        (
            "controller/tunelab/controller/scheduler.py",
            "import tunelab.agent",
            "tunelab.controller",
        ),
        (
            "controller/tunelab/analysis/compare.py",
            "from tunelab.controller import states",
            "tunelab.analysis",
        ),
        (
            "controller/tunelab/analysis/report/svg.py",
            "import tunelab.cli.common",
            "tunelab.analysis",
        ),
        ("proto/tunelab/common/durations.py", "from tunelab.bench import stats", "tunelab.common"),
        ("agent/tunelab/bench/stats.py", "from tunelab.agent import gpu", "tunelab.bench"),
        ("proto/tunelab/v1/__init__.py", "import tunelab.common.auth", "tunelab.v1"),
    ],
)
def test_a_forbidden_import_is_caught(
    tmp_path: Path, victim: str, line: str, contract: str
) -> None:
    """The checker is not vacuous: one added import (here inside a function) breaks the build."""
    copy = tmp_path / "repo"
    for folder in ("proto", "agent", "controller"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / victim
    path.write_text(path.read_text() + f"\n\ndef _sneaky() -> None:\n    {line}\n")
    found = violations(copy)
    assert any(v.startswith(f"{contract} must not import") for v in found), found


def test_a_transitive_import_is_caught(tmp_path: Path) -> None:
    """controller -> common -> agent is as bad as controller -> agent."""
    copy = tmp_path / "repo"
    for folder in ("proto", "agent", "controller"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "proto/tunelab/common/durations.py"
    path.write_text(path.read_text() + "\nfrom tunelab.agent import gpu  # noqa\n")
    found = violations(copy)
    assert any("tunelab.controller must not import tunelab.agent" in v for v in found), found
    assert any(" -> tunelab.common.durations -> tunelab.agent" in v for v in found), found


# --- the agent's own layers ---------------------------------------------------------------------
# Inside tunelab.agent, from the bottom: the plain modules (errors, statefile, statewriter,
# quarantine, recordbook, ...); procs (process supervision) and engines (what the agent knows of
# vLLM and SGLang) side by side, neither importing the other; servers (server lifecycle); runs (a
# run starts a server); then metrics, service and the daemon. Checked by ``violations`` beside
# CONTRACTS, transitively as they are; ``agent_cycles`` finds any loop the list does not name.
AGENT_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "tunelab.agent.procs",
        ("tunelab.agent.servers", "tunelab.agent.runs", "tunelab.agent.engines"),
    ),
    (
        "tunelab.agent.engines",
        ("tunelab.agent.servers", "tunelab.agent.runs", "tunelab.agent.procs"),
    ),
    ("tunelab.agent.servers", ("tunelab.agent.runs",)),
    ("tunelab.agent.recordbook", ("tunelab.agent.servers", "tunelab.agent.runs")),
    ("tunelab.agent.quarantine", ("tunelab.agent.servers", "tunelab.agent.runs")),
]


def agent_cycles(repo: Path) -> list[list[str]]:
    """Cycles among the agent's parts (each sub-package and each plain module one part), as
    lists of parts; empty when the parts form layers."""
    mods = modules(repo)

    def part(module: str) -> str | None:
        names = module.split(".")
        return ".".join(names[:3]) if names[:2] == ["tunelab", "agent"] and len(names) > 2 else None

    graph: dict[str, set[str]] = {}
    for module, path in mods.items():
        if (source := part(module)) is None:
            continue
        targets = {part(i) for i in imports_of(path, module) if i in mods}
        graph.setdefault(source, set()).update(t for t in targets if t and t != source)
    reach = {p: _reachable(graph, p) for p in graph}
    found: list[list[str]] = []
    for p in sorted(graph):
        loop = sorted(q for q in reach[p] if p in reach.get(q, set()))
        if loop and loop not in found:
            found.append(loop)
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), set()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _copy_with(tmp_path: Path, victim: str, line: str) -> Path:
    copy = tmp_path / "repo"
    for folder in ("proto", "agent", "controller"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / victim
    path.write_text(path.read_text() + f"\n\ndef _sneaky() -> None:\n    {line}\n")
    return copy


def test_the_agent_parts_have_no_cycle() -> None:
    assert agent_cycles(REPO) == []


@pytest.mark.parametrize(
    ("victim", "line", "contract"),
    [
        (
            "agent/tunelab/agent/procs/monitorclient.py",
            "from tunelab.agent.servers import registry",
            "tunelab.agent.procs",
        ),
        (
            "agent/tunelab/agent/procs/ladder.py",
            "import tunelab.agent.engines.phases",
            "tunelab.agent.procs",
        ),
        (
            "agent/tunelab/agent/engines/watch.py",
            "from tunelab.agent.servers import record",
            "tunelab.agent.engines",
        ),
        (
            "agent/tunelab/agent/engines/traces.py",
            "from tunelab.agent.procs import identity",
            "tunelab.agent.engines",
        ),
        (
            "agent/tunelab/agent/servers/profiler.py",
            "from tunelab.agent.runs import executor",
            "tunelab.agent.servers",
        ),
        (
            "agent/tunelab/agent/recordbook.py",
            "from tunelab.agent.servers import states",
            "tunelab.agent.recordbook",
        ),
        (
            "agent/tunelab/agent/quarantine.py",
            "from tunelab.agent.runs import record",
            "tunelab.agent.quarantine",
        ),
    ],
)
def test_a_forbidden_agent_import_is_caught(
    tmp_path: Path, victim: str, line: str, contract: str
) -> None:
    """Each agent layer's contract is not vacuous: one added import breaks it."""
    found = violations(_copy_with(tmp_path, victim, line))
    assert any(v.startswith(f"{contract} must not import") for v in found), found


@pytest.mark.parametrize(
    ("victim", "line", "loop"),
    [
        (  # the cycle this round broke: the record book reaching back into servers
            "agent/tunelab/agent/recordbook.py",
            "from tunelab.agent.servers import states",
            {"tunelab.agent.recordbook", "tunelab.agent.servers"},
        ),
        (  # no contract names these two: only the cycle check sees it
            "agent/tunelab/agent/statefile.py",
            "from tunelab.agent import statewriter",
            {"tunelab.agent.statefile", "tunelab.agent.statewriter"},
        ),
    ],
)
def test_an_agent_cycle_is_caught(tmp_path: Path, victim: str, line: str, loop: set[str]) -> None:
    found = agent_cycles(_copy_with(tmp_path, victim, line))
    assert any(loop <= set(cycle) for cycle in found), found
