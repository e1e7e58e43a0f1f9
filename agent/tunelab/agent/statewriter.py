"""State writes that survive a full or failing disk (the supervisor and the run executor keep
going on their in-memory state and the document lands once the disk takes it again)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import structlog

from tunelab.agent.statefile import write_json_atomic

log = structlog.get_logger(__name__)


class DurableWriter:
    """Writes state documents and never loses one: a write that fails (ENOSPC, EIO) is kept in
    memory, newest per path, and retried every ``retry_interval`` by one thread until it lands.

    Callers keep going on the in-memory state; :meth:`pending` says how many documents are not
    on disk yet (a metric).
    """

    def __init__(self, retry_interval: float = 1.0) -> None:
        self._interval = retry_interval
        self._pending: dict[Path, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, path: Path, data: Any) -> bool:
        """True when ``data`` is on disk now; False when it was queued for a retry."""
        with self._lock:
            self._pending.pop(path, None)  # a newer document supersedes a queued one
            try:
                write_json_atomic(path, data)
                return True
            except OSError as exc:
                self._pending[path] = data
                log.error("state_write_failed", path=str(path), error=str(exc), retry=True)
                self._ensure_thread()
                return False

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        """Retry every queued document once; returns how many are still not on disk."""
        with self._lock:
            for path, data in list(self._pending.items()):
                try:
                    write_json_atomic(path, data)
                except OSError:
                    continue
                del self._pending[path]
                log.info("state_write_recovered", path=str(path))
            return len(self._pending)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._retry, name="state-retry", daemon=True)
            self._thread.start()

    def _retry(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
