"""Layered configuration shared by both daemons: dataclass defaults, then a TOML table, then
``<PREFIX><KEY>`` environment variables, then flags — every value coerced by its kind and every
unknown key refused with a message naming it."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tunelab.common.auth import split_host_port
from tunelab.common.durations import parse_duration


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


class _Config(Protocol):
    def validate(self) -> Any: ...


C = TypeVar("C", bound=_Config)


@dataclass(frozen=True)
class KeyKinds:
    """Which keys hold durations, paths, booleans and integers (the rest are strings)."""

    durations: frozenset[str] = frozenset()
    paths: frozenset[str] = frozenset()
    bools: frozenset[str] = frozenset()
    ints: frozenset[str] = frozenset()

    def coerce(self, key: str, value: Any) -> Any:
        try:
            if key in self.durations:
                return parse_duration(value)
            if key in self.paths:
                return Path(str(value)) if value not in (None, "") else None
            if key in self.bools:
                return _boolean(value)
            if key in self.ints:
                if isinstance(value, bool):
                    raise ValueError("expected an integer")
                return int(value)
            return str(value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{key}: {exc}") from None


LOG_LEVELS = ("debug", "info", "warning", "error")


def check_daemon_basics(config: Any) -> None:
    """What both daemons require: ``listen`` is HOST:PORT, ``metrics_listen`` is HOST:PORT or
    empty (off), and ``log_level`` is one we know."""
    for key in ("listen", "metrics_listen"):
        value = getattr(config, key)
        if key == "metrics_listen" and not value:
            continue
        try:
            split_host_port(value)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    if str(config.log_level).lower() not in LOG_LEVELS:
        raise ConfigError(f"log_level: expected one of {', '.join(LOG_LEVELS)}")


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError("expected true or false")
    return text in ("1", "true", "yes")


def load_layered(
    cls: type[C],
    *,
    table: str,
    env_prefix: str,
    kinds: KeyKinds,
    config_file: Path | None,
    overrides: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> C:
    """Build and validate ``cls`` from its layers; a None flag means "not given"."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    listing = ", ".join(sorted(known))
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            data = tomllib.loads(config_file.read_text())
        except OSError as exc:
            raise ConfigError(f"--config {config_file}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--config {config_file}: {exc}") from None
        for key, value in data.get(table, data).items():
            if key not in known:
                raise ConfigError(f"{config_file}: unknown key {key!r} (known: {listing})")
            values[key] = kinds.coerce(key, value)
    for name, value in (os.environ if env is None else env).items():
        if name.startswith(env_prefix):
            key = name[len(env_prefix) :].lower()
            if key not in known:
                raise ConfigError(f"{name}: unknown setting (known: {listing})")
            values[key] = kinds.coerce(key, value)
    for key, value in overrides.items():
        if value is not None:
            values[key] = kinds.coerce(key, value)
    base = cls()
    # an empty path for a setting that has a default (state dir, database) keeps the default
    kept = {k: v for k, v in values.items() if v is not None or getattr(base, k) is None}
    built: C = replace(base, **kept)  # type: ignore[type-var]
    built.validate()
    return built
