"""Stream the events of a Chrome-trace JSON file (PyTorch's ``export_chrome_trace``), gzipped too.

A 500 MB trace must not need 500 MB of memory, so the file is never loaded whole: the reader
keeps a window of text, finds the ``traceEvents`` array and decodes one event at a time with the
standard library's C scanner (``json.JSONDecoder.raw_decode``). Memory is the window (at most
``MAX_VALUE_CHARS`` for the largest single value) plus what the caller keeps per event.

Why not ijson: ijson's C backend builds the same per-event dicts, so it saves nothing here, and
it is one more compiled dependency that the hosts we read traces on (a GPU box's own Python)
may lack; the format is simple enough that ~100 lines of our own do the job.

Both forms Chrome's trace format allows are read: an object with ``traceEvents`` (what PyTorch
writes), and a bare array of events. Other top-level keys (``deviceProperties``, ``schemaVersion``)
are decoded and dropped.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CHUNK_CHARS = 1 << 20
MAX_VALUE_CHARS = 64 << 20  # one event or one top-level value bigger than this is refused
# a gzipped trace that expands past this many times its size is refused as a gzip bomb (real
# Chrome traces compress 10-30x); small files get at least MIN_EXPANDED characters
MAX_EXPANSION = 200
MIN_EXPANDED = 64 << 20
WHITESPACE = " \t\n\r"


class TraceError(Exception):
    """The file is not a Chrome trace that can be read."""


class TraceTooLarge(TraceError):
    """The file is over the size the caller allows."""


def open_text(path: Path) -> IO[str]:
    """The trace as text, gunzipped when it starts with gzip's magic bytes (any file name)."""
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


@dataclass
class ReadBudget:
    """The work one read may do: events (over every file read with it) and a deadline
    (``time.monotonic()``); None for no bound. Past either, the read stops with TraceTooLarge."""

    max_events: int | None = None
    deadline: float | None = None
    events: int = 0

    @classmethod
    def of(cls, max_events: int | None, max_seconds: float | None) -> ReadBudget:
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        return cls(max_events, deadline)

    def check_time(self, name: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TraceTooLarge(f"{name}: reading the trace ran out of its time budget: stopped")

    def count(self, name: str) -> None:
        self.events += 1
        if self.max_events is not None and self.events > self.max_events:
            raise TraceTooLarge(f"{name}: more than {self.max_events} events: stopped")
        if self.events % 4096 == 0:
            self.check_time(name)


class _Window:
    """A sliding window over a text stream, refilled on demand."""

    def __init__(
        self, stream: IO[str], name: str = "", budget: ReadBudget | None = None, most: int = 0
    ) -> None:
        self.stream = stream
        self.text = ""
        self.pos = 0
        self.eof = False
        self.name = name
        self.budget = budget or ReadBudget()
        self.most = most  # characters the stream may expand to (0: no bound)
        self.read_chars = 0

    def fill(self) -> bool:
        """Read one more chunk; False at the end of the stream."""
        if self.eof:
            return False
        self.budget.check_time(self.name)
        try:
            chunk = self.stream.read(CHUNK_CHARS)
        except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
            raise TraceError(f"cannot read the trace: {exc}") from exc
        if not chunk:
            self.eof = True
            return False
        self.read_chars += len(chunk)
        if self.most and self.read_chars > self.most:
            raise TraceTooLarge(
                f"{self.name} expands to more than {self.most} characters ({MAX_EXPANSION}x its "
                "gzipped size): not a trace a profiler writes (a gzip bomb?), refused"
            )
        self.text = self.text[self.pos :] + chunk
        self.pos = 0
        return True

    def skip_space(self) -> str:
        """The next non-blank character (not consumed); '' at the end."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return text[pos]
            if not self.fill():
                return ""

    def expect(self, chars: str) -> str:
        found = self.skip_space()
        if not found or found not in chars:
            shown = repr(found) if found else "the end of the file"
            raise TraceError(f"expected one of {chars!r} in the trace, found {shown}")
        self.pos += 1
        return found

    def value(self, decoder: json.JSONDecoder) -> Any:
        """Decode the next JSON value, reading more text until it is complete."""
        self.skip_space()
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.text) - self.pos > MAX_VALUE_CHARS:
                    raise TraceError(
                        f"a value in the trace is larger than {MAX_VALUE_CHARS} characters"
                    ) from exc
                if not self.fill():
                    raise TraceError(f"the trace is not complete JSON: {exc.msg}") from exc
                continue
            # A number at the very end of the window may continue in the next chunk.
            if end == len(self.text) and not self.eof and self.fill():
                continue
            self.pos = end
            return value


def _array(window: _Window, decoder: json.JSONDecoder) -> Iterator[dict[str, Any]]:
    """The elements of the array whose '[' was just consumed; non-objects are skipped."""
    if window.skip_space() == "]":
        window.pos += 1
        return
    while True:
        item = window.value(decoder)
        window.budget.count(window.name)
        if isinstance(item, dict):
            yield item
        if window.expect(",]") == "]":
            return


def iter_events(
    path: Path,
    max_bytes: int | None = None,
    exact_numbers: bool = False,
    budget: ReadBudget | None = None,
) -> Iterator[dict[str, Any]]:
    """Every event of the trace at ``path``, one dict at a time.

    ``max_bytes`` caps the file's size on disk (compressed size for a gzipped file); a gzipped
    file may expand to at most ``MAX_EXPANSION`` times its size. ``budget`` bounds the events
    read and the time taken (TraceTooLarge past either).
    ``exact_numbers`` leaves every non-integer number as its text (``"12.345"``), so a
    timestamp of 1.7e15 microseconds keeps its nanoseconds (a float would round it to 0.25 us).
    """
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if max_bytes is not None and size > max_bytes:
        raise TraceTooLarge(f"{path.name} is {size} bytes, over the cap of {max_bytes}")
    decoder = json.JSONDecoder(parse_float=str) if exact_numbers else json.JSONDecoder()
    try:
        stream = open_text(path)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    gzipped = isinstance(getattr(stream, "buffer", None), gzip.GzipFile)
    most = max(size * MAX_EXPANSION, MIN_EXPANDED) if gzipped else 0
    with stream:
        window = _Window(stream, path.name, budget, most)
        first = window.expect("{[")
        if first == "[":
            yield from _array(window, decoder)
            return
        found = False
        if window.skip_space() == "}":
            window.pos += 1
        else:
            while True:
                key = window.value(decoder)
                window.expect(":")
                if key == "traceEvents" and window.expect("[") == "[":
                    found = True
                    yield from _array(window, decoder)
                else:
                    window.value(decoder)
                if window.expect(",}") == "}":
                    break
        if not found:
            raise TraceError(f"{path.name} has no traceEvents: not a Chrome trace")
