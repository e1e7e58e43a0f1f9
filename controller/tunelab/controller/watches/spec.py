"""A spec file with ``watch:``: one experiment document plus its schedule and judging rules,
validated whole before anything is stored (the document goes through the submission's own
checks with ``repeat`` set to ``launches``, so an occurrence is never refused later).

::

    watch:
      every: 6h            # a duration (down to 2s), or a 5-field cron line in UTC: "0 3 * * *"
      launches: 3          # the spec's repeat for each occurrence
      baseline: first      # first | previous | pinned N (occurrence N)
      metrics: [output_throughput, p99_ttft_ms]   # a point's field; NAME@c8 picks a sweep point
      margin: 2%           # changes smaller than this are "no change"
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml
from cronsim import CronSim, CronSimError

from tunelab.analysis.compare import POINT_FIELDS
from tunelab.common.durations import parse_duration
from tunelab.controller.spec.errors import SpecError, SpecIssue
from tunelab.controller.spec.expand import ExpandedExperiment, expand_text, parse_spec_text
from tunelab.controller.spec.limits import DEFAULT_LIMITS, SpecLimits
from tunelab.controller.spec.schema import NAME, Checker

WATCH_KEYS = {"every", "launches", "baseline", "metrics", "margin"}
MIN_EVERY = 2.0  # seconds: tests and demos run a watch every few seconds
MAX_EVERY = 366 * 86400.0
MAX_LAUNCHES = 100
MAX_METRICS = 16
DEFAULT_LAUNCHES = 3
DEFAULT_MARGIN = 0.02
METRIC = re.compile(r"^([a-z0-9_]+)(?:@([A-Za-z0-9.]+))?$")
PINNED = re.compile(r"^pinned\s+(\d+)$")


@dataclass(frozen=True)
class WatchSpec:
    every: str  # as written: "5s" or "0 3 * * *"
    period: float  # seconds between occurrences (a cron line's smallest gap)
    cron: str  # "" for a duration
    launches: int
    baseline: str  # first | previous | pinned
    pin: int  # the pinned occurrence's number (baseline: pinned N), else 0
    metrics: tuple[str, ...]
    margin: float  # a fraction: 0.02 for 2%

    def to_dict(self) -> dict[str, Any]:
        return {
            "every": self.every,
            "period": self.period,
            "cron": self.cron,
            "launches": self.launches,
            "baseline": self.baseline,
            "pin": self.pin,
            "metrics": list(self.metrics),
            "margin": self.margin,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WatchSpec:
        return cls(
            every=str(d["every"]),
            period=float(d["period"]),
            cron=str(d["cron"]),
            launches=int(d["launches"]),
            baseline=str(d["baseline"]),
            pin=int(d["pin"]),
            metrics=tuple(str(m) for m in d["metrics"]),
            margin=float(d["margin"]),
        )

    def next_due(self, after: float, anchor: float) -> float:
        """The first slot strictly after ``after``: ``anchor + k * period`` for a duration, the
        cron line's next minute (UTC) for a cron line. A controller that was down for many
        slots gets one slot, the next one ahead: missed occurrences run once, not many times."""
        if self.cron:
            start = datetime.fromtimestamp(after, UTC)
            return next(iter(CronSim(self.cron, start))).timestamp()
        steps = math.floor((after - anchor) / self.period) + 1
        return anchor + max(steps, 1) * self.period


@dataclass(frozen=True)
class WatchSubmission:
    name: str
    spec: WatchSpec
    base_yaml: str  # the experiment document (repeat: launches) each occurrence submits
    experiments: list[ExpandedExperiment]


def _cron_period(line: str) -> float:
    """The smallest gap between the next few slots of a cron line (for the stale alert)."""
    it = iter(CronSim(line, datetime(2026, 1, 1, tzinfo=UTC)))
    slots = [next(it).timestamp() for _ in range(8)]
    return min(b - a for a, b in itertools.pairwise(slots))


def _every(check: Checker, value: Any) -> tuple[str, float, str]:
    if isinstance(value, str) and len(value.split()) > 1:
        fields = value.split()
        if len(fields) != 5:
            check.fail("watch.every", f"a cron line has 5 fields, got {len(fields)}")
            return value, 0.0, ""
        line = " ".join(fields)
        try:
            CronSim(line, datetime(2026, 1, 1, tzinfo=UTC))
            return line, _cron_period(line), line
        except (CronSimError, StopIteration) as exc:
            check.fail("watch.every", f"not a valid cron line: {exc or line}")
            return value, 0.0, ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        check.fail("watch.every", "must be a duration (5s, 6h) or a 5-field cron line")
        return "", 0.0, ""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        check.fail("watch.every", f"{exc}, or a 5-field cron line such as '0 3 * * *'")
        return str(value), 0.0, ""
    if not MIN_EVERY <= seconds <= MAX_EVERY:
        check.fail("watch.every", f"must be between {MIN_EVERY:g}s and 366d, got {value}")
    return str(value), seconds, ""


def _margin(check: Checker, value: Any) -> float:
    margin = check.fraction(value, "watch.margin", 1.0, zero=True)
    return DEFAULT_MARGIN if margin is None else margin


def _baseline(check: Checker, value: Any) -> tuple[str, int]:
    text = str(value).strip() if isinstance(value, str | int) else ""
    if text in ("first", "previous"):
        return text, 0
    pinned = PINNED.match(text)
    if pinned and int(pinned.group(1)) >= 1:
        return "pinned", int(pinned.group(1))
    check.fail("watch.baseline", f"expected first, previous or 'pinned N' (N >= 1), got {value!r}")
    return "first", 0


def _metrics(check: Checker, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        check.fail("watch.metrics", "must be a non-empty list of metric names")
        return ()
    if len(value) > MAX_METRICS:
        check.fail("watch.metrics", f"at most {MAX_METRICS} metrics, got {len(value)}")
    out: list[str] = []
    for i, item in enumerate(value):
        found = METRIC.match(item) if isinstance(item, str) else None
        if found is None or found.group(1) not in POINT_FIELDS:
            check.fail(
                f"watch.metrics[{i}]",
                f"unknown metric {item!r} (expected one of: {', '.join(POINT_FIELDS)}, "
                "optionally with @KEY for one sweep point, e.g. output_throughput@c8)",
            )
        elif item in out:
            check.fail(f"watch.metrics[{i}]", f"{item!r} is listed twice")
        else:
            out.append(item)
    return tuple(out)


def parse_watch(raw: Any, repeat: Any) -> tuple[WatchSpec | None, list[SpecIssue]]:
    """The ``watch:`` section; ``repeat`` is the document's own (it must agree with launches)."""
    check = Checker()
    given = check.mapping(raw, "watch", WATCH_KEYS)
    if not isinstance(raw, Mapping):
        return None, check.issues
    for required in ("every", "metrics"):
        if required not in given:
            check.fail(f"watch.{required}", "is required")
    every, period, cron = _every(check, given.get("every", "1h"))
    default_launches = repeat if isinstance(repeat, int) and repeat > 1 else DEFAULT_LAUNCHES
    launches = check.integer(given.get("launches", default_launches), "watch.launches", 1)
    if launches > MAX_LAUNCHES:
        check.fail("watch.launches", f"at most {MAX_LAUNCHES}, got {launches}")
    if repeat is not None and repeat != launches:
        check.fail("repeat", f"a watch launches watch.launches ({launches}) times; drop repeat")
    baseline, pin = _baseline(check, given.get("baseline", "first"))
    metrics = _metrics(check, given.get("metrics", []))
    margin = _margin(check, given.get("margin", "2%"))
    if check.issues:
        return None, check.issues
    return WatchSpec(every, period, cron, launches, baseline, pin, metrics, margin), []


def watch_from_text(
    text: str, source: str = "", limits: SpecLimits = DEFAULT_LIMITS
) -> WatchSubmission | None:
    """The watch a spec text asks for, or None when it has no ``watch:`` (SpecError when it is
    not valid)."""
    docs = parse_spec_text(text, source, limits)
    with_watch = [d for d in docs if isinstance(d, Mapping) and "watch" in d]
    if not with_watch:
        return None
    if len(docs) != 1:
        raise SpecError([SpecIssue("watch", "a watch is the only document of its file")], source)
    raw = with_watch[0]
    for other in ("matrix", "ablation", "search"):
        if other in raw:
            raise SpecError(
                [SpecIssue(other, "a watch runs one configuration: no matrix, ablation or search")],
                source,
            )
    spec, issues = parse_watch(raw["watch"], raw.get("repeat"))
    name = raw.get("name")
    if isinstance(name, str) and not NAME.match(name):
        issues.append(SpecIssue("name", f"{name!r} does not match {NAME.pattern}"))
    if spec is None or issues:
        raise SpecError(issues, source)
    base = {k: v for k, v in raw.items() if k != "watch"}
    base["repeat"] = spec.launches
    base_yaml = yaml.safe_dump(base, sort_keys=False)
    experiments = expand_text(base_yaml, source, limits)  # the submission's own checks
    return WatchSubmission(str(name), spec, base_yaml, experiments)
