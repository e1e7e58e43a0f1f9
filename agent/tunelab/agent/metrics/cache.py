"""``/metrics`` bodies rendered once per sampler cycle and served as cached bytes.

The data behind ``/metrics`` changes once per sampler tick, so rendering it per scrape (2 ms on
the H200) was the whole cost of a scrape. Here the registry is rendered at the first scrape
after a tick (or once ``max_age`` has passed, so a stalled sampler still shows growing sample
ages), per format, together with its gzip form; every later scrape of that cycle copies bytes.

A few families must be as of the moment they are served (the energy counter, which advances
between reads): their collector is ``live``. The cached part leaves them out, and each scrape
renders only them and appends them. For gzip, the cached part is compressed once and the
compressor's state kept after a sync flush; a scrape continues a copy of that state with the
live lines, so the reply is one ordinary gzip stream and the cached bytes are never recompressed.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tunelab.agent.metrics.exposition import render

GZIP_LEVEL = 1  # cheapest: the body is small and sent over a LAN
_GZIP_WBITS = 31  # zlib's gzip wrapper


@dataclass(frozen=True)
class _Entry:
    generation: int
    rendered_at: float
    body: bytes  # the cached part, uncompressed
    gzip_head: bytes  # the cached part compressed, sync-flushed
    compressor: Any  # zlib compressobj positioned just after gzip_head


class ExpositionCache:
    """Rendered bodies for text (0.0.4) and OpenMetrics, uncompressed and gzip."""

    def __init__(
        self,
        registry: Any,
        live: Any,
        generation: Callable[[], int],
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._live = live
        self._live_names = frozenset(family.name for family in live.describe())
        self._generation = generation
        self._max_age = max_age
        self._clock = clock
        self._entries: dict[bool, _Entry] = {}
        self._lock = threading.Lock()
        self.renders = 0  # full renders so far (the test of "once per cycle")

    def body(self, openmetrics: bool, gzipped: bool) -> bytes:
        """The whole body of one scrape."""
        entry = self._entry(openmetrics)
        live = render(self._live, openmetrics)  # ends with "# EOF" for OpenMetrics
        if not gzipped:
            return entry.body + live
        tail = entry.compressor.copy()
        gz: bytes = entry.gzip_head + tail.compress(live) + tail.flush()
        return gz

    def _entry(self, openmetrics: bool) -> _Entry:
        generation = self._generation()
        entry = self._entries.get(openmetrics)
        if entry is not None and self._fresh(entry, generation):
            return entry
        with self._lock:  # one render per cycle, however many scrapes arrive at once
            entry = self._entries.get(openmetrics)
            if entry is not None and self._fresh(entry, generation):
                return entry
            body = render(self._registry, openmetrics, skip=self._live_names, eof=False)
            compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
            head = compressor.compress(body) + compressor.flush(zlib.Z_SYNC_FLUSH)
            entry = _Entry(generation, self._clock(), body, head, compressor)
            self._entries[openmetrics] = entry
            self.renders += 1
            return entry

    def _fresh(self, entry: _Entry, generation: int) -> bool:
        return entry.generation == generation and self._clock() - entry.rendered_at < self._max_age
