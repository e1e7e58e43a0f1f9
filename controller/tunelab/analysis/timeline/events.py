"""Named events read from a timeline, each with its time and the evidence that shows it.

Every rule reads whole windows and needs the condition to hold for :data:`MIN_WINDOWS` windows in
a row (a single odd sample is not an event). Times are seconds from the timeline's start (the
benchmark's start, just before the load generator starts), at the start of the first window
where the condition holds.

- ``kv_cache_full``: the engine preempted requests (its preemption counter rose), with the KV
  cache's use beside it: the cache is full and requests are evicted and recomputed.
- ``batch_limit``: requests wait in the engine's queue while the running count stays flat: the
  engine's batch limit binds (``--max-num-seqs`` on vLLM, ``--max-running-requests`` on SGLang).
- ``power_cap`` / ``clock_throttle``: the GPU draws its enforced power limit, or NVML gives a
  throttle reason (power cap, thermal, power brake, hardware slowdown) for its clocks.
- ``gpu_underused``: the GPU is busy less than half the time while the load generator is at
  the end of its CPU (saturated) or waits for one (starved): the client, not the server, sets
  the pace.
- ``throughput_step``: the client's output throughput changes by a step within one load point
  (one launch): a speed change the point's mean hides.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunelab.analysis.timeline.blocks import measured_windows
from tunelab.analysis.timeline.model import Timeline
from tunelab.bench.timeline.document import Value
from tunelab.common.clockevents import clock_event_names

MIN_WINDOWS = 2
KV_FULL = 0.95
POWER_AT_CAP = 0.97
GPU_LOW = 0.5
CLIENT_SATURATED = 0.85  # the self-check's max_client_cpu
CLIENT_STARVED = 0.05  # the self-check's max_client_runqueue
STEP_MIN_CHANGE = 0.2  # a throughput step: at least 20 % ...
STEP_MIN_SEPARATION = 4.0  # ... and this many pooled standard errors apart
STEP_MIN_SIDE = 3  # windows each side of it
# clock reasons that are not throttling: idle, a clock someone set, sync boost, display
_NOT_THROTTLE = {"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"}
KINDS = (
    "kv_cache_full",
    "batch_limit",
    "power_cap",
    "clock_throttle",
    "gpu_underused",
    "throughput_step",
)


@dataclass(frozen=True)
class Event:
    kind: str
    at_s: float  # from the timeline's start
    end_s: float
    evidence: str  # one sentence a person reads, with the numbers
    series: tuple[str, ...]  # what it was read from
    values: dict[str, Any] = field(default_factory=dict)
    gpu: int | None = None
    point: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at_s": round(self.at_s, 3),
            "end_s": round(self.end_s, 3),
            "evidence": self.evidence,
            "series": list(self.series),
            "values": self.values,
            "gpu": self.gpu,
            "point": self.point,
        }


def find_events(timeline: Timeline) -> list[Event]:
    """Every event on the timeline, in time order."""
    found: list[Event] = []
    found += _kv_cache_full(timeline)
    found += _batch_limit(timeline)
    for gpu in timeline.gpu_indices():
        found += _power_and_clocks(timeline, gpu)
        found += _gpu_underused(timeline, gpu)
    found += _throughput_steps(timeline)
    return sorted(found, key=lambda e: (e.at_s, e.kind))


# --- helpers -----------------------------------------------------------------------------------


def _runs(flags: Sequence[bool], min_len: int = MIN_WINDOWS) -> Iterator[range]:
    """Maximal runs of consecutive True windows at least ``min_len`` long."""
    start = None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            if i - start >= min_len:
                yield range(start, i)
            start = None


def _present(values: Iterable[Value]) -> list[float]:
    return [v for v in values if v is not None]


def _t(seconds: float) -> str:
    return f"t={seconds:.3g} s" if seconds < 100 else f"t={seconds:.0f} s"


def _span(timeline: Timeline, run: range) -> tuple[float, float]:
    return timeline.t(run.start), timeline.t(run.stop)


def _point(timeline: Timeline, window: int) -> int | None:
    span = timeline.point_at(window)
    return span.index if span is not None else None


# --- the rules ---------------------------------------------------------------------------------


def _kv_cache_full(timeline: Timeline) -> list[Event]:
    preempted = timeline.get("engine.preemptions")
    kv = timeline.get("engine.kv_cache_usage")
    flags = [(p or 0) > 0 for p in preempted]
    out = []
    for run in _runs(_bridged(flags), 1):
        count = sum(preempted[w] or 0 for w in run)
        peak = max(_present(kv[w] for w in run), default=None)
        at, end = _span(timeline, run)
        full = f" with the KV cache at {peak:.0%}" if peak is not None else ""
        out.append(
            Event(
                "kv_cache_full",
                at,
                end,
                f"the engine preempted {count:.0f} requests{full} from {_t(at)} to {_t(end)}",
                ("engine.preemptions", "engine.kv_cache_usage"),
                {"preemptions": count, "kv_cache_usage_max": peak},
                point=_point(timeline, run.start),
            )
        )
    return out


def _bridged(flags: list[bool]) -> list[bool]:
    """Counter rises land in the windows where a tick saw them: one quiet window between two
    busy ones is the same episode."""
    out = list(flags)
    for i in range(1, len(flags) - 1):
        if not flags[i] and flags[i - 1] and flags[i + 1]:
            out[i] = True
    return out


def _batch_limit(timeline: Timeline) -> list[Event]:
    waiting = timeline.get("engine.waiting")
    running = timeline.get("engine.running")
    flags = [
        (w or 0) >= 1 and r is not None and r > 0 for w, r in zip(waiting, running, strict=True)
    ]
    out = []
    for run in _runs(flags, MIN_WINDOWS + 1):
        held = _present(running[w] for w in run)
        if max(held) - min(held) > max(1.0, 0.05 * max(held)):
            continue  # running moves: the engine is still admitting, not held at a limit
        first, last = waiting[run.start] or 0, waiting[run.stop - 1] or 0
        at, end = _span(timeline, run)
        flag = timeline.batch_flag or "the engine's batch limit"
        grew = f"grew from {first:.0f} to {last:.0f}" if last > first else f"stayed at {last:.0f}"
        out.append(
            Event(
                "batch_limit",
                at,
                end,
                f"requests waiting {grew} while running held at {max(held):.0f} from {_t(at)} "
                f"to {_t(end)}: the batch limit binds ({flag})",
                ("engine.waiting", "engine.running"),
                {"waiting_first": first, "waiting_last": last, "running": max(held), "flag": flag},
                point=_point(timeline, run.start),
            )
        )
    return out


def _power_and_clocks(timeline: Timeline, gpu: int) -> list[Event]:
    power = timeline.get(f"gpu{gpu}.power_watts")
    reasons = timeline.get(f"gpu{gpu}.clock_event_reasons")
    sm = timeline.get(f"gpu{gpu}.sm_clock_hertz")
    facts = timeline.gpus[gpu] if gpu < len(timeline.gpus) else {}
    limit = facts.get("power_limit_watts")
    out = []
    if isinstance(limit, int | float) and limit > 0:
        flags = [p is not None and p >= POWER_AT_CAP * limit for p in power]
        for run in _runs(flags):
            at, end = _span(timeline, run)
            mean = statistics.fmean(_present(power[w] for w in run))
            out.append(
                Event(
                    "power_cap",
                    at,
                    end,
                    f"GPU {gpu} drew {mean:.0f} W of its {limit:.0f} W limit from {_t(at)} to "
                    f"{_t(end)}",
                    (f"gpu{gpu}.power_watts",),
                    {"power_watts": mean, "power_limit_watts": limit},
                    gpu=gpu,
                    point=_point(timeline, run.start),
                )
            )
    names = [_throttles(r) for r in reasons]
    for run in _runs([bool(n) for n in names]):
        at, end = _span(timeline, run)
        seen = sorted({n for w in run for n in names[w]})
        clocks = _present(sm[w] for w in run)
        top = facts.get("sm_clock_max_hertz")
        clock = f", SM clock {statistics.fmean(clocks) / 1e6:.0f} MHz" if clocks else ""
        clock += f" of {top / 1e6:.0f}" if clocks and isinstance(top, int | float) else ""
        out.append(
            Event(
                "clock_throttle",
                at,
                end,
                f"GPU {gpu} clocks throttled ({', '.join(seen)}){clock} from {_t(at)} to {_t(end)}",
                (f"gpu{gpu}.clock_event_reasons", f"gpu{gpu}.sm_clock_hertz"),
                {"reasons": seen},
                gpu=gpu,
                point=_point(timeline, run.start),
            )
        )
    return out


def _throttles(mask: Value) -> list[str]:
    if mask is None:
        return []
    return [n for n in clock_event_names(int(mask)) if n not in _NOT_THROTTLE]


def _gpu_underused(timeline: Timeline, gpu: int) -> list[Event]:
    util = timeline.get(f"gpu{gpu}.utilization_ratio")
    cpu = timeline.get("host.client_cpu_ratio")
    wait = timeline.get("host.client_wait_ratio")
    measured = {w for p in timeline.points for w in measured_windows(timeline, p.index)}
    causes: list[str] = []
    for w in range(timeline.windows):
        cause = ""
        if w in measured and util[w] is not None and (util[w] or 0) < GPU_LOW:
            if (cpu[w] or 0) >= CLIENT_SATURATED:
                cause = "saturated"
            elif (wait[w] or 0) >= CLIENT_STARVED:
                cause = "starved"
        causes.append(cause)
    out = []
    for run in _runs([bool(c) for c in causes]):
        at, end = _span(timeline, run)
        busy = statistics.fmean(_present(util[w] for w in run))
        cause = max(("saturated", "starved"), key=lambda c: sum(causes[w] == c for w in run))
        used = statistics.fmean(_present(cpu[w] for w in run) or [0.0])
        waited = statistics.fmean(_present(wait[w] for w in run) or [0.0])
        client = (
            f"the load generator used {used:.0%} of a core"
            if cause == "saturated"
            else f"the load generator waited for a CPU {waited:.0%} of the time"
        )
        out.append(
            Event(
                "gpu_underused",
                at,
                end,
                f"GPU {gpu} busy {busy:.0%} while {client} (client {cause}) from {_t(at)} to "
                f"{_t(end)}",
                (f"gpu{gpu}.utilization_ratio", "host.client_cpu_ratio", "host.client_wait_ratio"),
                {"utilization": busy, "client": cause},
                gpu=gpu,
                point=_point(timeline, run.start),
            )
        )
    return out


def _throughput_steps(timeline: Timeline) -> list[Event]:
    """The largest mean shift in output tokens per window inside each point's measured span,
    reported when it is both large (STEP_MIN_CHANGE) and clear of the windows' noise."""
    tokens = timeline.get("client.output_tokens")
    out = []
    for span in timeline.points:
        if span.ramp:
            continue  # a ramp steps its throughput on purpose
        windows = list(measured_windows(timeline, span.index))
        values = [float(tokens[w] or 0.0) for w in windows]
        split = _best_split(values)
        if split is None:
            continue
        k, before, after = split
        at = timeline.t(windows[k])
        rate = 1.0 / timeline.step
        change = after / before - 1.0 if before else math.inf
        out.append(
            Event(
                "throughput_step",
                at,
                at,
                f"output throughput stepped from {before * rate:.0f} to {after * rate:.0f} "
                f"tokens/s ({change:+.0%}) at {_t(at)} within point {span.index}",
                ("client.output_tokens",),
                {"before_tokens_per_s": before * rate, "after_tokens_per_s": after * rate},
                point=span.index,
            )
        )
    return out


def _best_split(values: list[float]) -> tuple[int, float, float] | None:
    n = len(values)
    best: tuple[float, int, float, float] | None = None
    for k in range(STEP_MIN_SIDE, n - STEP_MIN_SIDE + 1):
        left, right = values[:k], values[k:]
        a, b = statistics.fmean(left), statistics.fmean(right)
        spread = math.sqrt(
            (statistics.pvariance(left) * len(left) + statistics.pvariance(right) * len(right))
            / max(1, n - 2)
        )
        se = spread * math.sqrt(1 / len(left) + 1 / len(right))
        score = abs(a - b) / se if se > 0 else (math.inf if a != b else 0.0)
        if best is None or score > best[0]:
            best = (score, k, a, b)
    if best is None:
        return None
    score, k, a, b = best
    if score < STEP_MIN_SEPARATION or abs(b - a) < STEP_MIN_CHANGE * max(a, b):
        return None
    return k, a, b
