"""Terminal views of a bench run (rich): a progress bar per point while it runs, then a summary.

Drawn by the process that watches the bench process, never by the one measuring.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tunelab.bench.progress import ProgressState
from tunelab.bench.promptlengths import lengths_exact, prompt_tokens_line
from tunelab.common.textwidth import width


def point_label(concurrency: int, rate: float | str, point: dict[str, Any] | None = None) -> str:
    """``c=16``, ``rate=2.0/s``; a ramp or a timed trace (no rate of its own) by what it is."""
    if concurrency:
        return f"c={concurrency}"
    if point is not None and point.get("ramp"):
        ramp = point["ramp"]
        return f"ramp {ramp['start_rate']:g}->{ramp['end_rate']:g}/s"
    if point is not None and point.get("dataset") == "trace" and rate == "inf":
        return "trace"
    return f"rate={rate}/s"


def clock(seconds: float) -> str:
    """``1:02:03``, ``32:00`` or ``0:02.5``: a planned duration as a clock shows it (tenths
    under a minute, where they count)."""
    if seconds < 59.95 and round(seconds, 1) != round(seconds):
        return f"0:{seconds:04.1f}"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class BenchProgressView:
    """One bar per sweep point: requests done of total (or seconds of the duration)."""

    def __init__(self, enabled: bool, point_count: int, console: Console | None = None) -> None:
        self.enabled = enabled
        self.console = console
        self.point_count = point_count
        self.progress: Progress | None = None
        self.tasks: dict[int, TaskID] = {}
        self._warming: set[TaskID] = set()
        self._planned: set[int] = set()  # points whose schedule was said

    def __enter__(self) -> BenchProgressView:
        if self.enabled:
            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console or Console(stderr=True),
            )
            self.progress.start()
        return self

    def update(self, state: ProgressState) -> None:
        p = state.latest
        if p is None:
            return
        where = point_label(p.concurrency, p.request_rate)
        if not p.concurrency and not p.request_rate:  # no rate of its own: a timed trace
            where = "trace"
        label = f"point {p.point_index + 1}/{p.point_count} {where}"
        if p.planned_seconds > 0 and p.phase == "measure" and p.point_index not in self._planned:
            # a schedule (a timed trace, a counted open loop) says its length when it starts;
            # a timed trace the unit its timestamps were read in, on a terminal or not
            self._planned.add(p.point_index)
            said = p.schedule_unit or "the last one is due then"
            line = (
                f"{label}: {p.requests_total} requests over {clock(p.planned_seconds)} as "
                f"scheduled, {said}"
            )
            if self.progress is not None:
                self.progress.console.print(line, highlight=False)
            elif p.schedule_unit:
                print(line, file=sys.stderr, flush=True)
        if self.progress is None:
            return
        task = self.tasks.get(p.point_index)
        if task is None:
            task = self.progress.add_task(label, total=None, detail="")
            self.tasks[p.point_index] = task
            if p.phase == "warmup":
                self._warming.add(task)
        if p.phase == "warmup":
            total = p.requests_total or None
            detail = f"{p.requests_done}/{p.requests_total} warm-up req" if total else ""
            self.progress.update(
                task, description=f"{label} warm-up", total=total, completed=p.requests_done,
                detail=detail,
            )  # fmt: skip
            return
        if task in self._warming:  # measuring now: the bar starts again at 0 of the point's
            self._warming.discard(task)
            self.progress.reset(task)
        total = p.requests_total or None
        detail = (
            f"{p.requests_done}{'/' + str(p.requests_total) if p.requests_total else ''} req  "
            f"{p.output_tokens_per_second:,.0f} tok/s  {p.errors} errors"
        )
        if p.planned_seconds > 0 and p.phase == "measure":
            # the bar is the schedule's clock, the ETA the time until its last request is due
            # (then the requests still in flight)
            self.progress.update(
                task, description=label, total=p.planned_seconds,
                completed=min(p.elapsed_seconds, p.planned_seconds),
                detail=f"{detail}  planned {clock(p.planned_seconds)}",
            )  # fmt: skip
            return
        self.progress.update(
            task, description=label, total=total, completed=p.requests_done, detail=detail
        )
        if p.phase == "done" and total is None:
            self.progress.update(task, total=p.requests_done, completed=p.requests_done)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.progress is not None:
            self.progress.stop()


def _pair(point: dict[str, Any], metric: str, first: str = "mean", second: str = "p99") -> str:
    if not point["completed"]:
        return "-"
    low = point[f"{first}_{metric}_ms"]
    shown = "batched" if metric == "itl_per_token" and batched(point) else f"{low:.1f}"
    return f"{shown}/{point[f'{second}_{metric}_ms']:.1f}"


def batched(point: dict[str, Any]) -> bool:
    """Most per-token gaps were 0 ms: chunks the client read together, behind the stream (no
    server streams tokens 0.0 ms apart); the gaps are the client's, not the server's."""
    return bool(point["completed"]) and point.get("median_itl_per_token_ms", 1.0) < 0.05


def no_rate(point: dict[str, Any]) -> str:
    """Why a point's req/s is no rate ("" when it is one): one request (its own latency
    inverted), or a timed trace stopped early (a span of what finished, not the schedule's)."""
    if point["completed"] == 1:
        return "one request completed: no rate"
    trace = point_label(point["concurrency"], point["request_rate"], point) == "trace"
    if point.get("interrupted") and trace and point["completed"]:
        return f"stopped after {point['completed']} requests: no rate of the trace's schedule"
    return ""


CAUSES = {
    "cpu_saturated": "SATURATED",
    "cpu_wait": "STARVED: cpu wait",
    "connection_setup": "LATE: conn set-up",
    "event_loop_lag": "LATE: loop lag",
}


def client_column(point: dict[str, Any]) -> str:
    """The self-check in a word or two: ``ok``, or the cause the evidence shows."""
    cause = point.get("client_check", {}).get("client_cause")
    if cause:
        return CAUSES.get(str(cause), str(cause))
    if point.get("client_saturated"):
        return "SATURATED"
    return "STARVED" if point.get("client_starved") else "ok"


def render_summary(document: dict[str, Any], decode: bool, console: Console | None = None) -> None:
    """The summary table (one row per point), errors, warnings, and the decode line."""
    out = console or Console(width=None if sys.stdout.isatty() else width())
    # no vertical borders: ten columns and their figures fit in 100 without wrapping
    table = Table(
        title=f"tunelab bench: {document['config']['model']} ({document['status']})",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for header in (
        "point", "ok", "failed", "req/s", "out\ntok/s", "TTFT\nmean/p99", "TPOT\nmean/p99",
        "ITL/token\np50/p99", "E2E\nmean/p99", "client",
    ):  # fmt: skip
        table.add_column(header, justify="right", no_wrap=True)
    for p in document["points"]:
        table.add_row(
            point_label(p["concurrency"], p["request_rate"], p),
            str(p["completed"]),
            str(p["failed"]),
            "-" if no_rate(p) else f"{p['request_throughput']:.2f}",
            f"{p['output_throughput']:,.0f}",
            _pair(p, "ttft"),
            _pair(p, "tpot"),
            _pair(p, "itl_per_token", "median"),
            _pair(p, "e2el"),
            client_column(p),
        )
    out.print(table)
    out.print("times in ms; TPOT = (E2E - TTFT)/(tokens - 1); ITL/token = chunk gap / its tokens")
    for p in document["points"]:
        label = point_label(p["concurrency"], p["request_rate"], p)
        if no_rate(p):
            out.print(f"{label} req/s: {no_rate(p)}")
        if batched(p):
            out.print(
                f"{label} ITL/token p50: the client read most chunks together (0 ms apart, "
                "behind the stream), not the server's gaps: read TPOT"
            )
        if p["errors_by_kind"]:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(p["errors_by_kind"].items()))
            out.print(f"{label} errors: {kinds}")
        for key, name in (("by_turn", "turn"), ("by_prefix_group", "prefix group")):
            slices = p.get(key) or {}
            if 1 < len(slices) <= 16:
                parts = [
                    f"{k}: {v['median_ttft_ms']:.1f}/{v['median_tpot_ms']:.1f}"
                    for k, v in slices.items()
                    if v["median_ttft_ms"] is not None and v["median_tpot_ms"] is not None
                ]
                out.print(f"{label} TTFT/TPOT p50 ms by {name}: " + ", ".join(parts))
        if decode and p["completed"]:
            out.print(
                f"{label} decode: TPOT {p['mean_tpot_ms']:.2f} ms; per-token ITL min "
                f"{p['min_itl_per_token_ms']:.2f}, median {p['median_itl_per_token_ms']:.2f}, "
                f"max {p['max_itl_per_token_ms']:.2f} ms over {p['itl_per_token_samples']} "
                f"tokens ({p['completed']} requests, {p['mean_output_tokens']:.0f} tokens each)"
            )
    config = document.get("config") or {}
    slo = [f"{name} <= {config[key]:g} ms" for key, name in (
        ("slo_ttft_ms", "TTFT"), ("slo_tpot_ms", "TPOT"), ("slo_e2el_ms", "E2E"))
        if config.get(key)]  # fmt: skip
    for p in document["points"]:
        if p.get("request_goodput") is not None:
            label = point_label(p["concurrency"], p["request_rate"], p)
            out.print(
                f"{label} goodput: {p['request_goodput']:.2f} req/s, {p['good_requests']} of "
                f"{p['completed']} requests within {', '.join(slo) or 'the SLO'}"
            )
    dataset = document.get("dataset")
    exact = lengths_exact(document)
    said = any("lengths are approximate" in w for w in document.get("warnings", []))
    if dataset and not (said and exact is False):  # the warning below says it, once
        out.print(f"dataset {dataset['name']}: lengths {dataset['lengths']}")
    line = prompt_tokens_line(document["points"], None if said else exact)
    if line:
        out.print(line, highlight=False)
    for warning in document.get("warnings", []):
        out.print(f"[yellow]warning:[/yellow] {warning}")
