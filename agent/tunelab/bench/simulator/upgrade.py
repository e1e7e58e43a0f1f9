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

from tunelab.common.untrusted import read_untrusted, trusted_owners

MAX_BYTES = 4096
READ_SECONDS = 2.0
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
    """The file at ``path`` (no path, or a missing file: full speed, no version). The root agent
    reads it too, and it steers what is recorded: it is opened as untrusted (a regular file, no
    link, owned by root or this user, at most ``MAX_BYTES``), so another user's FIFO or link at
    a shared path is refused at once (SystemExit, naming why) instead of blocking the start."""
    if not path:
        return Upgrade()
    try:
        raw = read_untrusted(path, MAX_BYTES, owners=trusted_owners(), seconds=READ_SECONDS)
    except FileNotFoundError:
        return Upgrade()
    except OSError as exc:  # UntrustedFile among them: it names the file and the reason
        raise SystemExit(f"--speed-file {exc}") from None
    return parse_upgrade(raw.decode("utf-8", errors="replace"), f"--speed-file {path}")
