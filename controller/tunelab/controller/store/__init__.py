"""The controller's durable state: every SQL statement lives in this package."""

from tunelab.controller.store.base import (
    Store,
    StoreConflict,
    StoreError,
    StoreFull,
    StoreUnavailable,
)
from tunelab.controller.store.models import AttemptChange, AttemptRow, ExperimentRow, HostRow
from tunelab.controller.store.sqlite import SqliteStore

__all__ = [
    "AttemptChange",
    "AttemptRow",
    "ExperimentRow",
    "HostRow",
    "SqliteStore",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
]
