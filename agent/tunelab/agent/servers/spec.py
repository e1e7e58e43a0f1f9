"""What to launch: a validated, immutable server spec (argv list, never a shell string)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tunelab.agent.engines.profiles import ENGINES
from tunelab.agent.errors import InvalidSpec

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_ENV_VALUE = 32 * 1024
DEFAULT_READY_PATH = "/health"
DEFAULT_STARTUP_TIMEOUT = 20 * 60.0
DEFAULT_STOP_GRACE = 30.0
# Set in every server's environment; descendants inherit it, which lets a stop find a process
# that double-forked out of the group and out of the tree.
MARKER_ENV = "TUNELAB_SERVER_ID"


@dataclass(frozen=True)
class ServerSpec:
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

    def validated(self) -> ServerSpec:
        """Return self, or raise InvalidSpec naming the first bad field."""
        if not self.argv:
            raise InvalidSpec("spec.argv", "must not be empty")
        for i, arg in enumerate(self.argv):
            if "\0" in arg:
                raise InvalidSpec(f"spec.argv[{i}]", "must not contain NUL bytes")
        if not self.argv[0]:
            raise InvalidSpec("spec.argv[0]", "must name a program")
        if self.name and not SERVER_NAME.match(self.name):
            raise InvalidSpec(
                "spec.name", "expected 1-63 letters, digits, '.', '_' or '-', starting alnum"
            )
        if not 1 <= self.port <= 65535:
            raise InvalidSpec("spec.port", f"expected 1-65535, got {self.port}")
        for key, value in self.env.items():
            if not ENV_NAME.match(key):
                raise InvalidSpec(f"spec.env[{key!r}]", "name must match [A-Za-z_][A-Za-z0-9_]*")
            if key == MARKER_ENV:
                raise InvalidSpec(f"spec.env[{key!r}]", "is reserved by the agent")
            if "\0" in value:
                raise InvalidSpec(f"spec.env[{key!r}]", "value must not contain NUL bytes")
            if len(value) > MAX_ENV_VALUE:
                raise InvalidSpec(f"spec.env[{key!r}]", f"value longer than {MAX_ENV_VALUE} bytes")
        if self.cwd and not self.cwd.startswith("/"):
            raise InvalidSpec("spec.cwd", "must be an absolute path")
        if not self.ready_path.startswith("/") or any(c.isspace() for c in self.ready_path):
            raise InvalidSpec("spec.ready_path", "expected an absolute HTTP path such as /health")
        if self.ready_model and any(c.isspace() for c in self.ready_model):
            raise InvalidSpec("spec.ready_model", "must not contain whitespace")
        if not self.startup_timeout > 0:
            raise InvalidSpec("spec.startup_timeout_seconds", "must be > 0")
        if self.engine and self.engine not in ENGINES:
            raise InvalidSpec("spec.engine", f"expected one of {', '.join(ENGINES)} or empty")
        if not self.stop_grace >= 0:
            raise InvalidSpec("spec.stop_grace_seconds", "must be >= 0")
        return self

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        data["env"] = dict(self.env)
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
        )
