"""Open-file limit: a closed loop at concurrency 1024 holds more sockets than the usual soft
limit of 1024 allows, on both the client and the simulator side."""

from __future__ import annotations

import contextlib
import resource


def raise_fd_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit (no privilege needed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
