"""The controller's configuration: one frozen dataclass from a TOML file (``[controller]``), then
``TUNELAB_CONTROLLER_*`` environment variables, then flags; validated once at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tunelab.analysis.mlflow.sink import safe_uri
from tunelab.common.auth import ServerAuth
from tunelab.common.capacity import DEFAULT_MAX_STREAMS
from tunelab.common.configload import ConfigError, KeyKinds, check_daemon_basics, load_layered
from tunelab.controller.store.dburl import check_db, is_url, redact

ENV_PREFIX = "TUNELAB_CONTROLLER_"
__all__ = ["ENV_PREFIX", "ConfigError", "ControllerConfig", "load_config"]


def default_db() -> str:
    if os.geteuid() == 0:
        return "/var/lib/tunelab-controller/controller.db"
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "tunelab" / "controller.db")


@dataclass(frozen=True)
class ControllerConfig:
    listen: str = "127.0.0.1:50050"
    db: str = field(default_factory=default_db)  # a SQLite file, or a postgresql:// URL
    secrets_file: Path | None = None  # host tokens; default <db>.secrets (SQLite only)
    token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_listen: str = ""  # e.g. 127.0.0.1:9474
    agent_token_file: Path | None = None  # token for agents added without one
    log_level: str = "info"
    tick: float = 0.5
    host_poll_interval: float = 5.0
    attempt_poll_interval: float = 2.0
    unknown_after_failures: int = 3
    lease_timeout: float = 600.0
    scrape_interval: float = 5.0
    default_metrics_port: int = 9473
    results_retention_count: int = 500
    results_retention_age: float = 7 * 86400.0
    workers: int = 32  # agent calls in flight at once (host polls, starts, follows)
    max_variants: int = 10_000  # experiments one submission may expand to
    agent_call_timeout: float = 3.0  # deadline of GetInfo / GetRun to an agent
    agent_start_timeout: float = 10.0  # deadline of StartRun / CancelRun
    max_streams: int = DEFAULT_MAX_STREAMS  # open watches and log follows; more: RESOURCE_EXHAUSTED
    mlflow_tracking_uri: str = ""  # export every finished attempt to this MLflow server
    mlflow_experiment: str = "tunelab"  # ...into this MLflow experiment
    mlflow_interval: float = 30.0  # how often the exporter looks for finished attempts
    db_turn_lease: float = (
        3.0  # PostgreSQL: a frozen controller keeps the scheduling turn this long
    )
    slurm_dir: str = ""  # job scripts, specs, tokens, logs; default <db>.slurm (shared with nodes)
    slurm_report_address: str = ""  # HOST:PORT a Slurm job dials to report; default listen
    slurm_agent_command: str = "tunelab-agent"  # how a job starts the agent on its node
    watch_webhook_url: str = ""  # POST each watch verdict here as {"text": ...}; a secret
    watch_webhook_timeout: float = 5.0  # one POST's limit; retried with back-off

    def auth(self) -> ServerAuth:
        return ServerAuth.from_files(
            self.token_file, self.tls_cert, self.tls_key, self.tls_client_ca
        )

    def validate(self) -> ControllerConfig:
        check_daemon_basics(self)
        problem = check_db(self.db)
        if problem:
            raise ConfigError(f"db: {problem}")
        if self.mlflow_tracking_uri and not self.mlflow_experiment.strip():
            raise ConfigError("mlflow_experiment: must not be empty")
        parts = urlsplit(self.watch_webhook_url)
        if self.watch_webhook_url and (parts.scheme not in ("http", "https") or not parts.hostname):
            # never quoted: the URL is a secret
            raise ConfigError("watch_webhook_url: must be an http:// or https:// URL with a host")
        for key in _DURATIONS:
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0")
        numbers = ("unknown_after_failures", "results_retention_count", "workers", "max_variants")
        for key in (*numbers, "max_streams"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1")
        return self

    def secrets_path(self) -> Path:
        """Where host tokens are kept: ``secrets_file``, else beside the SQLite file, else (a
        PostgreSQL URL) in this machine's state folder. Each controller keeps its own."""
        if self.secrets_file is not None:
            return self.secrets_file
        if is_url(self.db):
            return Path(default_db()).parent / "postgresql.secrets"
        return Path(f"{Path(self.db).expanduser()}.secrets")

    def secret_files(self) -> tuple[Path | None, ...]:
        """Files whose contents are secrets: masked in the log wherever they appear."""
        return (self.token_file, self.agent_token_file)

    def slurm_path(self) -> Path:
        """Where Slurm jobs' files live: ``slurm_dir``, else beside the SQLite file."""
        if self.slurm_dir:
            return Path(self.slurm_dir).expanduser()
        if is_url(self.db):
            return Path(default_db()).parent / "slurm"
        return Path(f"{Path(self.db).expanduser()}.slurm")

    def redacted(self) -> dict[str, str]:
        values = {f.name: str(getattr(self, f.name)) for f in fields(self)}
        values["db"] = redact(self.db)  # a URL may carry a password
        values["mlflow_tracking_uri"] = safe_uri(self.mlflow_tracking_uri)
        values["watch_webhook_url"] = "(hidden)" if self.watch_webhook_url else ""
        return values


_DURATIONS = {
    "tick",
    "agent_call_timeout",
    "agent_start_timeout",
    "host_poll_interval",
    "attempt_poll_interval",
    "lease_timeout",
    "scrape_interval",
    "results_retention_age",
    "mlflow_interval",
    "db_turn_lease",
    "watch_webhook_timeout",
}


KINDS = KeyKinds(
    durations=frozenset(_DURATIONS),
    paths=frozenset(
        {
            "token_file",
            "tls_cert",
            "tls_key",
            "tls_client_ca",
            "agent_token_file",
            "secrets_file",
        }
    ),
    ints=frozenset(
        {
            "unknown_after_failures",
            "default_metrics_port",
            "results_retention_count",
            "workers",
            "max_variants",
            "max_streams",
        }
    ),
)


def load_config(
    config_file: Path | None, overrides: dict[str, Any], env: dict[str, str] | None = None
) -> ControllerConfig:
    """Defaults < ``[controller]`` table < TUNELAB_CONTROLLER_* < flags (``overrides``)."""
    return load_layered(
        ControllerConfig,
        table="controller",
        env_prefix=ENV_PREFIX,
        kinds=KINDS,
        config_file=config_file,
        overrides=overrides,
        env=env,
    )
