"""structlog configured once per process: JSON when not on a terminal, a console renderer on one.

grpcio and other stdlib loggers go through the same processors, so a daemon's log is one stream
of one format. One of them is a ``LogRedaction``: every value of every event passes through a
``tunelab.common.redaction.Redactor`` (secrets by name, by shape, and the values it is taught,
such as the daemon's token files), so no secret reaches the log.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import structlog

from tunelab.common.redaction import Redactor


class LogRedaction:
    """A structlog processor that masks secrets in every event value."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor or Redactor()

    def learn_files(self, paths: Iterable[Path | None]) -> None:
        """Mask the contents of these token files (each stripped line) from now on."""
        for path in paths:
            if path is None:
                continue
            try:
                text = Path(path).read_text()
            except (OSError, UnicodeDecodeError):
                continue  # the daemon's own start-up reports a file it cannot read
            for line in text.splitlines():
                self.redactor.learn(line)
                self.redactor.learn_text(line)

    def __call__(
        self, logger: object, name: str, event_dict: structlog.typing.EventDict
    ) -> structlog.typing.EventDict:
        for key, value in list(event_dict.items()):
            if isinstance(value, str | list | dict) and key not in ("timestamp", "level"):
                event_dict[key] = self._mask(key, value)
        return event_dict

    def _mask(self, key: str, value: Any) -> Any:
        if self.redactor.is_secret(key) and isinstance(value, str):
            return "<redacted>"
        return self.redactor.document(value)


def configure_logging(
    level: str = "info",
    *,
    json: bool | None = None,
    stream: TextIO | None = None,
    redaction: LogRedaction | None = None,
) -> LogRedaction:
    """Set up structlog and stdlib logging. ``json=None`` picks JSON unless ``stream`` is a tty.
    Returns the redaction processor, to be taught the process's secrets."""
    redaction = redaction or LogRedaction()
    out = stream if stream is not None else sys.stderr
    as_json = (not out.isatty()) if json is None else json
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redaction,
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if as_json else _identity,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return redaction


def _identity(
    logger: object, name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    return event_dict
