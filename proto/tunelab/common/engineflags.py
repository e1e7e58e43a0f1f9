"""An engine's own command-line flags, shipped per version, so a typo is refused before a
model load (``--max-num-seq``: "did you mean --max-num-seqs?") instead of after an import.

The lists (``engine_flags/<engine>-<version>.txt``, one flag a line, ``#`` comments) are
refreshed from the engine's parser where it is installed, or from its released wheel's source:

    python -m tunelab.common.engineflags vllm            # imports vLLM's own parser
    python -m tunelab.common.engineflags sglang --wheel sglang-0.5.23-...whl

Only vLLM and SGLang are checked; any other server (a launcher, the simulator) is not, so an
unknown program is never refused. A version with no list is checked against the newest list
of that engine only where no version was named (a spec without ``server.engine_version``).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import re
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

LISTS = Path(__file__).with_name("engine_flags")
ENGINES = ("vllm", "sglang")
_VERSION = re.compile(r"^(?P<engine>[a-z]+)-(?P<version>[0-9][0-9A-Za-z.+]*)\.txt$")


def engine_named(argv: Sequence[str]) -> str:
    """The engine an argv runs ("vllm", "sglang"; "" for anything else): ``vllm serve``,
    ``python -m vllm.entrypoints...``, ``python -m sglang.launch_server``, ``sglang serve``,
    behind a launcher's first words (``taskset -c 0 /venv/bin/vllm serve``)."""
    return _engine_word(argv)[0]


def _engine_word(argv: Sequence[str]) -> tuple[str, int]:
    for i, arg in enumerate(argv[:6]):
        word = PurePosixPath(str(arg)).name
        for engine in ENGINES:
            if word == engine or word.startswith(engine + "."):
                return engine, i
    return "", -1


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:4])


@functools.cache
def shipped() -> dict[str, dict[str, frozenset[str]]]:
    """engine -> version -> its flags, from the shipped lists."""
    out: dict[str, dict[str, frozenset[str]]] = {}
    for path in sorted(LISTS.glob("*.txt")):
        m = _VERSION.match(path.name)
        if m is None:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        flags = frozenset(x.strip() for x in lines if x.strip().startswith("--"))
        out.setdefault(m["engine"], {})[m["version"]] = flags
    return out


def flags_for(engine: str, version: str = "") -> tuple[str, frozenset[str]] | None:
    """(version, flags) of ``engine``: the named version's list, or the newest where none is
    named; None where there is no list to check against."""
    versions = shipped().get(engine, {})
    if version:
        base = version.split("+")[0]  # 0.32.0+cpu
        return (base, versions[base]) if base in versions else None
    if not versions:
        return None
    newest = max(versions, key=_version_key)
    return newest, versions[newest]


@dataclass(frozen=True)
class UnknownFlag:
    flag: str  # as given
    suggestion: str  # the engine's nearest flag ("" when none is near)
    engine: str
    version: str

    def problem(self) -> str:
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return f"not a flag of {self.engine} {self.version}{hint}"


def _base(flag: str) -> str:
    """The option a token names: ``--a_b=1`` and ``--a-b.key`` (vLLM's JSON fields) are
    ``--a-b``."""
    name = flag.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def unknown_flags(engine: str, flags: Iterable[str], version: str = "") -> list[UnknownFlag]:
    """The long options in ``flags`` that ``engine`` (at ``version``) does not have."""
    found = flags_for(engine, version)
    if found is None:
        return []
    named, known = found
    out = []
    for flag in flags:
        if not flag.startswith("--") or flag == "--":
            continue
        base = _base(flag)
        if base in known or (base.startswith("--no-") and "--" + base[5:] in known):
            continue
        near = difflib.get_close_matches(base, sorted(known), n=1, cutoff=0.8)
        out.append(UnknownFlag(flag, near[0] if near else "", engine, named))
    return out


def engine_run(argv: Sequence[str]) -> str:
    """The engine an argv runs as its program (``vllm``, ``sglang``) or module (``-m
    sglang.launch_server``); "" where it only names one otherwise (``-X sglang...``)."""
    engine, at = _engine_word(argv)
    if at >= 0 and (
        PurePosixPath(str(argv[at])).name == engine or (at > 0 and argv[at - 1] == "-m")
    ):
        return engine
    return ""


def argv_flags(argv: Sequence[str]) -> list[str]:
    """The long options of an argv after the engine it runs (a launcher's are not its)."""
    _engine, at = _engine_word(argv)
    return [str(a) for a in argv[at + 1 :] if str(a).startswith("--")] if engine_run(argv) else []


_USAGE = re.compile(r"^\s*(usage: |\[-)")  # argparse's "usage: prog [-h]", "   [--flag X]"


def usage_line(line: str) -> bool:
    """A line of argparse's usage block: its error line says what is wrong, the usage block
    is 20 lines of fragments around it."""
    return bool(_USAGE.match(line))


def argv_port(argv: Sequence[str]) -> int | None:
    """The port a server's argv gives it (``--port N`` or ``--port=N``, the last one, as
    argparse takes it; after the engine's own word where one is named); None when none."""
    _engine, at = _engine_word(argv)
    found: int | None = None
    words = [str(a) for a in argv[at + 1 :]]
    for i, arg in enumerate(words):
        value = words[i + 1] if arg == "--port" and i + 1 < len(words) else ""
        value = arg.removeprefix("--port=") if arg.startswith("--port=") else value
        if value.isdigit():
            found = int(value)
    return found


# refreshing the lists ---------------------------------------------------------------------------
def from_parser(engine: str) -> tuple[str, set[str]]:
    """The installed engine's version and every option string of its server's parser."""
    from importlib import metadata

    if engine == "vllm":
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[import-not-found]

        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]
        except ImportError:
            from vllm.utils import FlexibleArgumentParser  # type: ignore[import-not-found]
        parser = make_arg_parser(FlexibleArgumentParser())
    else:
        from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
    flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    return metadata.version(engine).split("+")[0], flags


WHEEL_SOURCES = {
    "vllm": ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py",
             "vllm/entrypoints/openai/cli_args.py"),
    "sglang": ("sglang/srt/server_args.py", "sglang/srt/arg_groups/fields/"),
}  # fmt: skip
WHEEL_DATACLASSES = {"vllm": ("BaseFrontendArgs", "FrontendArgs"), "sglang": None}  # None: all


def from_wheel(engine: str, wheel: str) -> tuple[str, set[str]]:
    """A released wheel's version and flags, read from its source with ``ast`` (no import):
    every ``--flag`` given to ``add_argument``, its aliases, and the fields of the dataclasses
    the parsers are built from, as ``--field-name``."""
    flags: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith(".py") and name.startswith(WHEEL_SOURCES[engine]):
                tree = ast.parse(archive.read(name).decode())
                flags |= _source_flags(tree, WHEEL_DATACLASSES[engine])
    return Path(wheel).name.split("-")[1], flags


def _source_flags(tree: ast.AST, classes: tuple[str, ...] | None) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            found |= {str(a.value) for a in node.args if isinstance(a, ast.Constant)}
        if isinstance(node, ast.keyword) and node.arg == "aliases":
            elts = getattr(node.value, "elts", [])
            found |= {str(e.value) for e in elts if isinstance(e, ast.Constant)}
        if isinstance(node, ast.ClassDef) and (classes is None or node.name in classes):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = item.target.id
                    if not name.startswith("_") and name.islower():
                        found.add("--" + name.replace("_", "-"))
    return {f for f in found if f.startswith("--")}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tunelab.common.engineflags")
    p.add_argument("engine", choices=ENGINES)
    p.add_argument("--wheel", help="read a released wheel instead of the installed engine")
    args = p.parse_args(argv)
    if args.wheel:
        version, flags = from_wheel(args.engine, args.wheel)
        source = Path(args.wheel).name
    else:
        version, flags = from_parser(args.engine)
        source = f"{args.engine} {version}'s parser"
    path = LISTS / f"{args.engine}-{version}.txt"
    header = f"# {source}: {len(flags)} flags (python -m tunelab.common.engineflags)"
    path.write_text("\n".join([header, *sorted(flags)]) + "\n", encoding="utf-8")
    print(f"{path}: {len(flags)} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
