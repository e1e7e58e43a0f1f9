"""Host tokens, kept out of the database in one 0600 JSON file beside it.

A token in a SQLite row also lands in the ``-wal`` file, in freed pages and in every backup of
the database; a separate file that only the controller's user can read keeps it out of all
three. Writes replace the file atomically (temporary file, fsync, rename), so a crash leaves
the old or the new set, never half of one. ``path=None`` keeps them in memory (tests).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from tunelab.controller.store.base import StoreError

MODE = 0o600


class HostSecrets:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}
        if path is not None and path.exists():
            if path.stat().st_mode & 0o077:
                path.chmod(MODE)
            try:
                data = json.loads(path.read_text())
                self._tokens = {str(k): str(v) for k, v in data.get("host_tokens", {}).items()}
            except (ValueError, AttributeError) as exc:
                raise StoreError(f"{path}: not a tunelab secrets file ({exc})") from None

    def get(self, host: str) -> str | None:
        with self._lock:
            return self._tokens.get(host)

    def set_many(self, tokens: dict[str, str | None]) -> None:
        """Set (or, with None, remove) tokens and write the file before returning."""
        with self._lock:
            updated = dict(self._tokens)
            for host, token in tokens.items():
                if token:
                    updated[host] = token
                else:
                    updated.pop(host, None)
            if updated != self._tokens:
                self._write(updated)
            self._tokens = updated

    def set(self, host: str, token: str | None) -> None:
        self.set_many({host: token})

    def _write(self, tokens: dict[str, str]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, MODE)
        os.fchmod(fd, MODE)  # whatever the umask, and if tmp existed with another mode
        with os.fdopen(fd, "wb") as out:
            out.write(json.dumps({"host_tokens": tokens}, sort_keys=True).encode())
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
