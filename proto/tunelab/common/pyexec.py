"""The argv of every child Python that tunelab starts.

``-P`` keeps the caller's working directory (and the script's folder) off ``sys.path``: a child
started from a folder that holds its own ``agent/`` or ``tunelab/`` can only import the installed
tunelab, never run that folder's code (as root, on a shared host, that would be an injection).
"""

from __future__ import annotations

import sys


def python_module_argv(module: str, *args: str) -> list[str]:
    """``[python, -P, -m, module, *args]`` with this interpreter."""
    return [sys.executable, "-P", "-m", module, *args]
