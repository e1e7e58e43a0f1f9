"""One summary of one or more traces: where the time went.

Definitions (docs/profiles.md says the same):

- **GPU events** are complete events (``ph: X``) of category ``kernel``, ``gpu_memcpy`` or
  ``gpu_memset``; their device is ``args.device`` (else ``pid``), their stream ``args.stream``
  (else ``tid``). A kernel's self time is its duration.
- **CPU ops** are complete events of category ``cpu_op`` (``Operator`` in old traces) and the
  CUDA runtime and driver calls (``cuda_runtime``, ``cuda_driver``: ``cudaLaunchKernel``,
  ``cuLaunchKernelEx``), as torch's ``key_averages()`` lists them. An op's self time is its
  duration less the time of the ops and calls nested in it on the same thread, so an
  ``aten::mm``'s launch is the launch's time, not the op's (a launch-bound server shows here).
- **Wall time** of a file is the span of all its complete events; with several files (one per
  rank or process) ``wall_ms`` is the longest.
- **GPU idle share**: for each device, 1 - (union of its GPU events' intervals) / wall time;
  over several devices and files, idle time over wall time, both summed. Per stream, the gaps
  between its own first and last event are given too: a launch-bound or CPU-bound server shows
  them as a high idle share with the GPU events short and dense.
- **Steps**: ``user_annotation`` events whose name starts with a step marker (vLLM 0.32's
  ``execute_context_<n>(..)_generation_<m>(..)``, older ``execute_model`` /
  ``gpu_model_runner: forward``, the profiler's ``ProfilerStep#``); the first marker with events
  is used; vLLM's steps with no prefill (``execute_context_0(0)_``) are the decode steps.
- **Categories** are over GPU time when the trace has GPU events, else over CPU self time.

Memory: per event kept, 20 bytes in typed arrays (start, end, name id); names are interned once.
The events of one thread or stream come sorted in PyTorch's traces; when they do not, one sort
of that thread's events is done (then about 100 bytes per event of that thread, transiently).
"""

from __future__ import annotations

import heapq
import statistics
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunelab.analysis.profiles.categories import CATEGORIES, categorize
from tunelab.analysis.profiles.traceread import ReadBudget, iter_events

GPU_EVENT_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
CPU_OP_CATEGORIES = frozenset({"cpu_op", "operator", "cuda_runtime", "cuda_driver"})
# vLLM 0.32 names each engine step execute_context_<n>(<tokens>)_generation_<m>(<tokens>): n
# prefill and m decode requests in the batch; a step with n = 0 is a pure decode step.
STEP_MARKERS = ("execute_context_", "execute_model", "gpu_model_runner: forward", "ProfilerStep#")
DECODE_STEP = "execute_context_0(0)_"
GPU = "gpu"
CPU = "cpu"


def to_ns(value: object) -> int | None:
    """Microseconds (an int, or a number's text as ``exact_numbers`` leaves it) to nanoseconds."""
    if type(value) is str:
        whole, dot, frac = value.partition(".")
        if dot and len(frac) <= 3 and whole.isdigit() and frac.isdigit():  # PyTorch's form
            return int(whole) * 1000 + int(frac.ljust(3, "0"))
        return _slow_ns(value)
    if type(value) is int:
        return value * 1000
    if type(value) is float:
        return round(value * 1000)
    return None


def _slow_ns(text: str) -> int | None:
    """Signs, more than three decimals (rounded half up), exponents."""
    whole, dot, frac = text.strip().partition(".")
    if dot and frac.isdigit() and (whole.lstrip("-").isdigit() or whole in ("", "-")):
        sign = -1 if whole.startswith("-") else 1
        digits = (frac + "000")[:3]
        rounding = 1 if len(frac) > 3 and frac[3] >= "5" else 0
        return sign * (abs(int(whole or "0")) * 1000 + int(digits) + rounding)
    try:
        return round(float(text) * 1000)
    except ValueError:
        return None


@dataclass
class _Spans:
    """Intervals of one thread or stream: start and end in ns, and the name's id."""

    starts: array[int] = field(default_factory=lambda: array("q"))
    ends: array[int] = field(default_factory=lambda: array("q"))
    names: array[int] = field(default_factory=lambda: array("i"))
    ordered: bool = True

    def add(self, start: int, end: int, name: int) -> None:
        if self.starts and (
            start < self.starts[-1] or (start == self.starts[-1] and end > self.ends[-1])
        ):
            self.ordered = False
        self.starts.append(start)
        self.ends.append(end)
        self.names.append(name)

    def in_order(self) -> Iterator[tuple[int, int, int]]:
        """(start, end, name id), by start, the longer first at equal starts (a parent first)."""
        if self.ordered:
            yield from zip(self.starts, self.ends, self.names, strict=True)
            return
        order = sorted(range(len(self.starts)), key=lambda i: (self.starts[i], -self.ends[i]))
        for i in order:
            yield self.starts[i], self.ends[i], self.names[i]


@dataclass(frozen=True)
class TopEntry:
    name: str
    kind: str  # "gpu" (kernels, copies) or "cpu" (ops)
    self_ms: float
    calls: int
    share: float  # of all self time of the same kind
    category: str


@dataclass(frozen=True)
class StreamUse:
    file: int  # index into trace_files
    device: int
    stream: int
    events: int
    busy_ms: float
    span_ms: float
    idle_share: float  # gaps between the stream's own events, over its span


@dataclass(frozen=True)
class DeviceUse:
    file: int
    device: int
    busy_ms: float
    idle_share: float  # over the file's wall time


@dataclass(frozen=True)
class Steps:
    marker: str
    count: int
    mean_ms: float
    p50_ms: float
    max_ms: float
    decode_count: int | None = None  # steps with no prefill in them, where the engine says so
    decode_mean_ms: float | None = None


@dataclass(frozen=True)
class ProfileSummary:
    trace_files: tuple[str, ...]
    events: int
    wall_ms: float
    gpu_ms: float  # self time of all GPU events, every device and file
    cpu_ms: float  # self time of all CPU ops
    top: tuple[TopEntry, ...]
    categories_basis: str  # "gpu" or "cpu"
    categories: dict[str, float]  # category -> ms (every category, zero included)
    gpu_idle_share: float | None
    devices: tuple[DeviceUse, ...]
    streams: tuple[StreamUse, ...]
    steps: Steps | None
    output_tokens: int | None = None  # given by the caller (the benchmark's window), if known
    # Every name's self time, for diffs (not in to_json: it can be long).
    by_name: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict, repr=False)

    def category_shares(self) -> dict[str, float]:
        total = sum(self.categories.values())
        return {k: (v / total if total else 0.0) for k, v in self.categories.items()}

    def to_json(self) -> dict[str, Any]:
        shares = self.category_shares()
        return {
            "trace_files": list(self.trace_files),
            "events": self.events,
            "wall_ms": self.wall_ms,
            "gpu_ms": self.gpu_ms,
            "cpu_ms": self.cpu_ms,
            "top": [
                {
                    "name": t.name,
                    "self_ms": t.self_ms,
                    "calls": t.calls,
                    "share": t.share,
                    "category": t.category,
                    "kind": t.kind,
                }
                for t in self.top
            ],
            "categories_basis": self.categories_basis,
            "categories": {
                k: {"ms": v, "share": round(shares[k], 6)} for k, v in self.categories.items()
            },
            "gpu_idle_share": self.gpu_idle_share,
            "devices": [vars(d) for d in self.devices],
            "streams": [vars(s) for s in self.streams],
            "steps": None if self.steps is None else vars(self.steps),
            "output_tokens": self.output_tokens,
        }


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _union(intervals: Iterable[tuple[int, int, int]]) -> int:
    """Total length covered by sorted (start, end, _) intervals."""
    total = 0
    cur_start = cur_end = None
    for start, end, _ in intervals:
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


class _FileReader:
    """Accumulates one file's events."""

    def __init__(self, names: dict[tuple[str, str], int]) -> None:
        self.names = names  # (kind, name) -> id, shared across files
        self.gpu: dict[tuple[int, int], _Spans] = {}
        self.cpu: dict[tuple[object, object], _Spans] = {}
        self.steps: dict[str, list[int]] = {m: [] for m in STEP_MARKERS}
        self.decode_steps: list[int] = []
        self.first: int | None = None
        self.last: int | None = None
        self.events = 0

    def _name_id(self, kind: str, name: str) -> int:
        key = (kind, name)
        found = self.names.get(key)
        if found is None:
            found = self.names[key] = len(self.names)
        return found

    def feed(self, event: dict[str, Any]) -> None:
        self.events += 1
        if event.get("ph") != "X":
            return
        start, dur = to_ns(event.get("ts")), to_ns(event.get("dur"))
        if start is None or dur is None or dur < 0:
            return
        end = start + dur
        self.first = start if self.first is None else min(self.first, start)
        self.last = end if self.last is None else max(self.last, end)
        category = str(event.get("cat", "")).lower()
        name = str(event.get("name", ""))
        if category in GPU_EVENT_CATEGORIES:
            args = event.get("args")
            args = args if isinstance(args, dict) else {}
            device = _int(args.get("device"), _int(event.get("pid"), 0))
            stream = _int(args.get("stream"), _int(event.get("tid"), 0))
            spans = self.gpu.setdefault((device, stream), _Spans())
            spans.add(start, end, self._name_id(GPU, f"{category}\0{name}"))
        elif category in CPU_OP_CATEGORIES:
            spans = self.cpu.setdefault((event.get("pid"), event.get("tid")), _Spans())
            spans.add(start, end, self._name_id(CPU, name))
        elif category == "user_annotation":
            for marker in STEP_MARKERS:
                if name.startswith(marker):
                    self.steps[marker].append(dur)
                    if name.startswith(DECODE_STEP):
                        self.decode_steps.append(dur)
                    break


def _int(value: object, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return default


def summarize(
    paths: Sequence[Path],
    top: int = 20,
    max_bytes: int | None = None,
    output_tokens: int | None = None,
    max_events: int | None = None,
    max_seconds: float | None = None,
) -> ProfileSummary:
    """Read each trace once, in order, and summarise them together; ``max_events`` (over all
    the files) and ``max_seconds`` bound the read (TraceTooLarge past either)."""
    budget = ReadBudget.of(max_events, max_seconds)
    names: dict[tuple[str, str], int] = {}
    self_ns: dict[int, int] = {}
    calls: dict[int, int] = {}
    devices: list[DeviceUse] = []
    streams: list[StreamUse] = []
    step_durations: dict[str, list[int]] = {m: [] for m in STEP_MARKERS}
    decode_steps: list[int] = []
    wall_ns = events = idle_total = device_wall_total = 0
    for index, path in enumerate(paths):
        reader = _FileReader(names)
        for event in iter_events(path, max_bytes=max_bytes, exact_numbers=True, budget=budget):
            reader.feed(event)
        events += reader.events
        file_wall = (reader.last or 0) - (reader.first or 0)
        wall_ns = max(wall_ns, file_wall)
        for marker, durations in reader.steps.items():
            step_durations[marker].extend(durations)
        decode_steps.extend(reader.decode_steps)
        for spans in reader.cpu.values():
            _cpu_self_times(spans, self_ns, calls)
        by_device: dict[int, list[_Spans]] = {}
        for (device, stream), spans in sorted(reader.gpu.items()):
            by_device.setdefault(device, []).append(spans)
            busy = _union(spans.in_order())
            span = max(spans.ends) - min(spans.starts)
            streams.append(
                StreamUse(
                    index, device, stream, len(spans.starts), _ms(busy), _ms(span),
                    round(1 - busy / span, 6) if span else 0.0,
                )
            )  # fmt: skip
            for name, start, end in zip(spans.names, spans.starts, spans.ends, strict=True):
                self_ns[name] = self_ns.get(name, 0) + (end - start)
                calls[name] = calls.get(name, 0) + 1
        for device, group in sorted(by_device.items()):
            busy = _union(heapq.merge(*(s.in_order() for s in group)))
            idle = max(file_wall - busy, 0)
            idle_total += idle
            device_wall_total += file_wall
            share = round(idle / file_wall, 6) if file_wall else 0.0
            devices.append(DeviceUse(index, device, _ms(busy), share))
    return _assemble(
        [p.name for p in paths], events, wall_ns, names, self_ns, calls, devices, streams,
        step_durations, decode_steps, top, output_tokens,
        round(idle_total / device_wall_total, 6) if device_wall_total else None,
    )  # fmt: skip


def _cpu_self_times(spans: _Spans, self_ns: dict[int, int], calls: dict[int, int]) -> None:
    """Self time of each op on one thread: its duration less its direct children's. An op
    whose only child has its own name (``aten::div_`` dispatching to ``aten::div_``) is one
    call, as torch's ``key_averages()`` counts it (it merges such a child into its parent)."""
    stack: list[list[int]] = []  # [end, name id, children's time, start, children, same name]
    for start, end, name in spans.in_order():
        while stack and stack[-1][0] <= start:
            _close(stack.pop(), self_ns, calls)
        if stack:
            parent = stack[-1]
            parent[2] += min(end, parent[0]) - start
            parent[4] += 1
            if parent[4] == 1:
                parent[5] = int(parent[1] == name)
        stack.append([end, name, 0, start, 0, 0])
        calls[name] = calls.get(name, 0) + 1
    while stack:
        _close(stack.pop(), self_ns, calls)


def _close(frame: list[int], self_ns: dict[int, int], calls: dict[int, int]) -> None:
    end, name, children, start, count, same = frame
    self_ns[name] = self_ns.get(name, 0) + max(end - start - children, 0)
    if count == 1 and same:
        calls[name] -= 1  # its only child, of its own name, was the same call


def _assemble(
    files: list[str],
    events: int,
    wall_ns: int,
    names: dict[tuple[str, str], int],
    self_ns: dict[int, int],
    calls: dict[int, int],
    devices: list[DeviceUse],
    streams: list[StreamUse],
    step_durations: dict[str, list[int]],
    decode_steps: list[int],
    top: int,
    output_tokens: int | None,
    gpu_idle_share: float | None,
) -> ProfileSummary:
    by_name: dict[tuple[str, str], tuple[int, int]] = {}
    kind_total = {GPU: 0, CPU: 0}
    for (kind, raw), ident in names.items():
        shown = raw.split("\0", 1)[1] if kind == GPU else raw
        ns, n = self_ns.get(ident, 0), calls.get(ident, 0)
        old_ns, old_n = by_name.get((kind, shown), (0, 0))
        by_name[(kind, shown)] = (old_ns + ns, old_n + n)
        kind_total[kind] += ns
    basis = GPU if kind_total[GPU] else CPU
    per_category = dict.fromkeys(CATEGORIES, 0)
    categories_of: dict[tuple[str, str], str] = {}
    for (kind, raw), ident in names.items():
        event_category, _, shown = raw.partition("\0") if kind == GPU else ("", "", raw)
        category = categorize(shown, event_category)
        categories_of[(kind, shown)] = category
        if kind == basis:
            per_category[category] += self_ns.get(ident, 0)
    ranked = sorted(by_name.items(), key=lambda item: (-item[1][0], item[0][0], item[0][1]))
    entries = tuple(
        TopEntry(
            name=shown,
            kind=kind,
            self_ms=_ms(ns),
            calls=n,
            share=round(ns / kind_total[kind], 6) if kind_total[kind] else 0.0,
            category=categories_of[(kind, shown)],
        )
        for (kind, shown), (ns, n) in ranked[:top]
    )
    steps = None
    for marker in STEP_MARKERS:
        durations = step_durations[marker]
        if durations:
            steps = Steps(
                marker=marker,
                count=len(durations),
                mean_ms=_ms(round(statistics.fmean(durations))),
                p50_ms=_ms(round(statistics.median(durations))),
                max_ms=_ms(max(durations)),
                decode_count=len(decode_steps) if marker == STEP_MARKERS[0] else None,
                decode_mean_ms=(
                    _ms(round(statistics.fmean(decode_steps)))
                    if marker == STEP_MARKERS[0] and decode_steps
                    else None
                ),
            )
            break
    return ProfileSummary(
        trace_files=tuple(files),
        events=events,
        wall_ms=_ms(wall_ns),
        gpu_ms=_ms(kind_total[GPU]),
        cpu_ms=_ms(kind_total[CPU]),
        top=entries,
        categories_basis=basis,
        categories={k: _ms(v) for k, v in per_category.items()},
        gpu_idle_share=gpu_idle_share,
        devices=tuple(devices),
        streams=tuple(streams),
        steps=steps,
        output_tokens=output_tokens,
        by_name=by_name,
    )
