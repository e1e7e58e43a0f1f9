"""What to launch: a validated, immutable server spec (argv list, never a shell string)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NewType

from tunelab.agent.engines.profiles import ENGINES
from tunelab.agent.errors import InvalidSpec
from tunelab.common.specbounds import (
    RESERVED_ENV,
    ServerFields,
    SpecViolation,
    check_server_fields,
)
from tunelab.common.specbounds import (
    SERVER_NAME as SERVER_NAME,  # re-exported: run ids and server ids share the rule
)

DEFAULT_READY_PATH = "/health"
DEFAULT_STARTUP_TIMEOUT = 20 * 60.0
DEFAULT_STOP_GRACE = 30.0
# Set in every server's environment; descendants inherit it, which lets a stop find a process
# that double-forked out of the group and out of the tree.
MARKER_ENV = RESERVED_ENV


@dataclass(frozen=True)
class ServerSpec:
    """A server spec as the wire or a state file gave it; ``validated()`` makes it startable."""

    argv: tuple[str, ...]
    port: int
    name: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    ready_path: str = DEFAULT_READY_PATH
    ready_model: str = ""
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    stop_grace: float = DEFAULT_STOP_GRACE
    engine: str = ""  # an engine profile (vllm | sglang | generic); empty = detect from argv
    auto_port: bool = False  # a run's server: the agent picks the port (port is 0 until then)
    profile: bool = False  # started ready to be profiled (tunelab server start --profile)
    redact: tuple[str, ...] = ()  # more secret names (the spec's redact:), masked in the log

    def validated(self) -> ValidServerSpec:
        """Return self, or raise InvalidSpec naming the first bad field (the bounds are
        ``tunelab.common.specbounds``', the same the controller checks at submission; checked
        on the values themselves: this domain type knows nothing of the wire)."""
        fields = ServerFields(
            argv=self.argv,
            port=self.port,
            name=self.name,
            env=self.env,
            cwd=self.cwd,
            ready_path=self.ready_path,
            ready_model=self.ready_model,
            startup_timeout_seconds=self.startup_timeout,
            stop_grace_seconds=self.stop_grace,
            auto_port=self.auto_port,
            redact=self.redact,
        )
        try:
            check_server_fields(fields)
        except SpecViolation as exc:
            raise InvalidSpec(exc.field, exc.problem) from None
        if not self.ready_path:  # filled with the default from an empty message field
            raise InvalidSpec("spec.ready_path", "expected an absolute HTTP path such as /health")
        if not self.startup_timeout > 0:
            raise InvalidSpec("spec.startup_timeout_seconds", "must be > 0")
        if self.engine and self.engine not in ENGINES:
            raise InvalidSpec("spec.engine", f"expected one of {', '.join(ENGINES)} or empty")
        if not self.stop_grace >= 0:
            raise InvalidSpec("spec.stop_grace_seconds", "must be >= 0")
        return ValidServerSpec(self)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        data["env"] = dict(self.env)
        data["redact"] = list(self.redact)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerSpec:
        return cls(
            argv=tuple(data["argv"]),
            port=int(data["port"]),
            name=str(data.get("name", "")),
            env=dict(data.get("env", {})),
            cwd=str(data.get("cwd", "")),
            ready_path=str(data.get("ready_path", DEFAULT_READY_PATH)),
            ready_model=str(data.get("ready_model", "")),
            startup_timeout=float(data.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT)),
            stop_grace=float(data.get("stop_grace", DEFAULT_STOP_GRACE)),
            engine=str(data.get("engine", "")),
            auto_port=bool(data.get("auto_port", False)),
            profile=bool(data.get("profile", False)),
            redact=tuple(str(n) for n in data.get("redact", ())),
        )


# A spec that has passed ``validated()``: what the registry starts. The check runs once, where a
# spec enters (the wire, for StartServer and StartRun); the agent's own edits of a valid spec
# say why they keep it valid (``runs.executor._with_port``) or check again.
ValidServerSpec = NewType("ValidServerSpec", ServerSpec)
