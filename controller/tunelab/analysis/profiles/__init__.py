"""Profiles: read PyTorch Chrome-trace JSON in bounded memory, summarise it, diff two of them.

A plain library (standard library only, no daemon code): the CLI's ``tunelab profile`` and the
controller's report use it, and it runs where only a trace and a Python are at hand.

Errors::

    TraceError            the file is not a trace we can read (not JSON, no ``traceEvents``,
     |                    one event larger than the reader's bound, a truncated file)
     +-- TraceTooLarge    the file is larger than the caller's cap
"""

from tunelab.analysis.profiles.traceread import TraceError, TraceTooLarge

__all__ = ["TraceError", "TraceTooLarge"]
