"""The agent's configuration: one frozen dataclass, from a TOML file, then ``TUNELAB_AGENT_*``
environment variables, then command-line flags; validated once at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tunelab.common.auth import ServerAuth
from tunelab.common.capacity import DEFAULT_MAX_STREAMS
from tunelab.common.configload import ConfigError, KeyKinds, check_daemon_basics, load_layered

ENV_PREFIX = "TUNELAB_AGENT_"
__all__ = ["ENV_PREFIX", "AgentConfig", "ConfigError", "load_config"]


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/tunelab-agent")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tunelab-agent"


@dataclass(frozen=True)
class AgentConfig:
    listen: str = "127.0.0.1:50051"
    state_dir: Path = field(default_factory=default_state_dir)
    token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_listen: str = ""  # e.g. 127.0.0.1:9473; empty = no /metrics endpoint
    reflection: bool = True
    log_level: str = "info"
    probe_interval: float = 0.05
    kill_timeout: float = 10.0
    gpu_release_timeout: float = 60.0
    sampler_interval: float = 1.0
    sampler_slow_interval: float = 15.0
    sysfs_root: Path = Path("/")
    nvml_snapshot: Path | None = None  # answer GPU queries from a captured snapshot (demo, tests)
    audit_on_start: bool = True
    max_streams: int = DEFAULT_MAX_STREAMS  # open logs -f and watches; beyond: RESOURCE_EXHAUSTED
    datasets_dir: Path | None = None  # benchmark dataset files; default <state_dir>/datasets

    def auth(self) -> ServerAuth:
        return ServerAuth.from_files(
            self.token_file, self.tls_cert, self.tls_key, self.tls_client_ca
        )

    def validate(self) -> AgentConfig:
        check_daemon_basics(self)
        for key in ("probe_interval", "sampler_interval", "sampler_slow_interval"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0")
        for key in ("kill_timeout", "gpu_release_timeout"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be >= 0")
        if self.max_streams < 1:
            raise ConfigError("max_streams: must be >= 1")
        return self

    def secret_files(self) -> tuple[Path | None, ...]:
        """Files whose contents are secrets: masked in the log wherever they appear."""
        return (self.token_file,)

    def redacted(self) -> dict[str, Any]:
        """For the start-up log line: every key, with no secret values (tokens live in files)."""
        return {f.name: str(getattr(self, f.name)) for f in fields(self)}


KINDS = KeyKinds(
    durations=frozenset(
        {
            "probe_interval",
            "kill_timeout",
            "gpu_release_timeout",
            "sampler_interval",
            "sampler_slow_interval",
        }
    ),
    paths=frozenset(
        {
            "state_dir",
            "token_file",
            "tls_cert",
            "tls_key",
            "tls_client_ca",
            "sysfs_root",
            "nvml_snapshot",
            "datasets_dir",
        }
    ),
    bools=frozenset({"reflection", "audit_on_start"}),
    ints=frozenset({"max_streams"}),
)


def load_config(
    config_file: Path | None, overrides: dict[str, Any], env: dict[str, str] | None = None
) -> AgentConfig:
    """Defaults < ``[agent]`` table of the TOML file < TUNELAB_AGENT_* < flags (``overrides``)."""
    return load_layered(
        AgentConfig,
        table="agent",
        env_prefix=ENV_PREFIX,
        kinds=KINDS,
        config_file=config_file,
        overrides=overrides,
        env=env,
    )
