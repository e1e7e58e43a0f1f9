"""The tunelab host agent: inference-server lifecycle, audit, metrics and experiment runs."""

from tunelab.common import __version__

__all__ = ["__version__"]
