"""The simulator's "upgrade" file (``--speed-file``), read once at start: a number that scales
every step time (2 = twice as slow), then optionally ``version V``, the engine version this
start pretends to run. The agent reads the same file when it records a run's provenance just
before the start, so a watch's occurrence after an "upgrade" names the version that changed::

    1.6
    version 0.5.3
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_BYTES = 4096
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_~-]{0,63}")


@dataclass(frozen=True)
class Upgrade:
    scale: float = 1.0
    version: str | None = None


def parse_upgrade(text: str, where: str) -> Upgrade:
    """``where`` names the file in errors (SystemExit: the simulator refuses to start)."""
    tokens = text.split()
    if not tokens:
        return Upgrade()
    try:
        scale = float(tokens[0])
    except ValueError:
        raise SystemExit(f"{where}: expected a number, got {tokens[0][:40]!r}") from None
    if not 0.0 < scale < 1000.0:
        raise SystemExit(f"{where}: expected a number in (0, 1000), got {scale}")
    rest = tokens[1:]
    if not rest:
        return Upgrade(scale)
    if len(rest) != 2 or rest[0] != "version" or not VERSION.fullmatch(rest[1]):
        raise SystemExit(
            f"{where}: after the number, expected one line 'version V' (V: letters, digits, "
            f"'.+_~-', at most 64), got {' '.join(rest)[:80]!r}"
        )
    return Upgrade(scale, rest[1])


def read_upgrade(path: str) -> Upgrade:
    """The file at ``path`` (no path, or a missing file: full speed, no version)."""
    if not path:
        return Upgrade()
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(MAX_BYTES)
    except FileNotFoundError:
        return Upgrade()
    return parse_upgrade(text, f"--speed-file {path}")
