"""Agent domain errors, mapped to gRPC status codes once, in :mod:`tunelab.agent.service`.

::

    AgentError
    ├── InvalidSpec        a request field is wrong (names the field)      INVALID_ARGUMENT
    ├── NotFound           no server / run with that id                    NOT_FOUND
    ├── Conflict           the request cannot apply in the current state   FAILED_PRECONDITION
    │   └── PortInUse      the server's port is already taken              FAILED_PRECONDITION
    ├── Busy               the host is running something else              RESOURCE_EXHAUSTED
    └── Unavailable        the agent cannot act now (state dir, monitor)   UNAVAILABLE
        └── DiskFull       the state dir is out of space or quota          RESOURCE_EXHAUSTED
"""

from __future__ import annotations

import errno
from pathlib import Path


class AgentError(Exception):
    """Base of every error the agent reports to a caller."""


class InvalidSpec(AgentError):
    """A field of a request is malformed; ``field`` is its dotted path."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class NotFound(AgentError):
    pass


class Conflict(AgentError):
    pass


class PortInUse(Conflict):
    pass


class Busy(AgentError):
    pass


class Unavailable(AgentError):
    pass


class DiskFull(Unavailable):
    pass


def storage_error(exc: OSError, path: Path, doing: str) -> Unavailable:
    """The error a caller sees when a state write failed: it names the disk and what did not
    happen, so the operator knows where to make room."""
    message = f"cannot write {path} ({exc.strerror or exc}); {doing}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(message)
    return Unavailable(message)
