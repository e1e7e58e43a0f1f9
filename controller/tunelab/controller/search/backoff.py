"""The one error that ends a search: ``SearchSpecError`` (the stored search cannot be read or
names a strategy this code does not have). Anything else a search step raises (a missing
optional package on this controller, a bug, a host of trouble) says nothing of the search
itself: the control loop's step guard (controller/guard.py) marks the search, logs one line and
tries it again with back-off, since the search may go on once it is fixed or on another
controller."""

from __future__ import annotations


class SearchSpecError(ValueError):
    """The search as stored cannot be run by any controller: it ends FAILED with this message."""
