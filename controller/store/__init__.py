"""The controller's durable state: every SQL statement lives in this package."""

from controller.store.base import Store, StoreConflict
from controller.store.models import AttemptRow, ExperimentRow, HostRow
from controller.store.sqlite import SqliteStore

__all__ = ["AttemptRow", "ExperimentRow", "HostRow", "SqliteStore", "Store", "StoreConflict"]
