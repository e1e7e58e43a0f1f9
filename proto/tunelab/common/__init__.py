"""The tunelab wire package: the gRPC contract (``tunelab.v1``) and the small helpers both sides
of it share (auth, channels, logging, durations). No business logic lives here; ``agent`` and
``controller`` each depend on this package and never on each other."""

from importlib import metadata

try:
    __version__ = metadata.version("tunelab")
except metadata.PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
