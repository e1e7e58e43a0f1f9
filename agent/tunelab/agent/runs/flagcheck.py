"""A vLLM or SGLang server's flags against that engine's own argument list, for the version
installed on this host (:mod:`tunelab.common.engineflags`), so a typo is refused at StartServer
and StartRun, in milliseconds, instead of after the engine's import. Another program, an engine
version with no shipped list, or an ``engine`` other than the one the argv runs (``generic``) is
not checked: never a false refusal."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tunelab.agent.errors import InvalidSpec
from tunelab.agent.runs.provenance import engine_version
from tunelab.agent.servers.spec import ServerSpec
from tunelab.common import engineflags

VersionOf = Callable[[Sequence[str], Mapping[str, str]], dict[str, Any]]


def check_engine_flags(
    spec: ServerSpec, field: str = "spec.argv", version_of: VersionOf = engine_version
) -> None:
    engine = engineflags.engine_run(spec.argv)  # the argv runs it, as the spec says if it says
    if engine not in engineflags.ENGINES or spec.engine not in ("", engine):
        return
    version = str(version_of(spec.argv, spec.env).get("version") or "")
    bad = engineflags.unknown_flags(engine, engineflags.argv_flags(spec.argv), version)
    if bad:
        raise InvalidSpec(field, "; ".join(f"{b.flag}: {b.problem()}" for b in bad))
