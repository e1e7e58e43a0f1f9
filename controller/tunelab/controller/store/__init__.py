"""The controller's durable state: every SQL statement lives in this package (statements.py)."""

from tunelab.controller.store.base import (
    Store,
    StoreConflict,
    StoreError,
    StoreFenced,
    StoreFull,
    StoreNotFound,
    StoreUnavailable,
)
from tunelab.controller.store.models import (
    AttemptChange,
    AttemptRow,
    ExperimentRow,
    FencingToken,
    HostRow,
)
from tunelab.controller.store.sqlite import SqliteStore

__all__ = [
    "AttemptChange",
    "AttemptRow",
    "ExperimentRow",
    "FencingToken",
    "HostRow",
    "SqliteStore",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreFenced",
    "StoreFull",
    "StoreNotFound",
    "StoreUnavailable",
]
