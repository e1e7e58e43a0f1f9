"""An occurrence's verdict: the judgement of its figures (``figures.py``) against its baseline
(``tunelab.analysis.watch.judge_occurrence``), with what changed beside it
(``provenance_changes``), the change points of its window and each metric's state.

The verdict document written once per occurrence (``watch show --json``'s ``occurrences``)::

    verdict     regression | improvement | no change | undecided | baseline
    baseline    the number of the occurrence it was judged against (None for a baseline)
    method, confidence, metrics    the judgement's (one row per metric: change_pct, interval,
                                   p_adjusted, launches, verdict, missing)
    changes     [{field, before, after}]: provenance that differs from the baseline's
    values      {metric: [one value per successful launch]}
    launches    successful launches; launches_total: launches queued
    provenance  the first successful launch's, as the agent recorded it (redacted)
    reason      why there is no judgement, or why a baseline was pooled or replaced ("" for
                the plain first baseline); the webhook and ``watch show`` print it
    means       {metric: the mean over its launches} (the change points' series)
    baseline_pool   the occurrences pooled as the baseline it was judged against
    pool        ``first``: the baseline pool in effect after it (the next one's baseline)
    state       {metric: {state, since, cause, step_at, seen_point}} after it
                (``tunelab.analysis.watch.state``)
    change_points   [{occurrence, metric, change_pct, p, shift}] over the window it closes

Judging reads a bounded history (``History``): the newest ``WINDOW`` judged occurrences and the
baseline's, never the whole of it, so its cost does not grow with the watch's age.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.watch import Occurrence, judge_occurrence, provenance_changes
from tunelab.analysis.watch.baseline import MAX_POOL, POOL, USE, decide, pooled, unusable
from tunelab.analysis.watch.changes import WINDOW, marks
from tunelab.analysis.watch.judge import COUNTS, UNDECIDED, metric_of
from tunelab.analysis.watch.state import MetricState, Observation, step
from tunelab.controller.store.watch_models import OccurrenceRow
from tunelab.controller.watches.spec import WatchSpec

BASELINE = "baseline"
REPLICATES = 3  # launches: 1: occurrences pooled as the current side's replicates


def _launched(o: OccurrenceRow) -> bool:
    """Judged, with successful launches."""
    return o.verdict is not None and int(o.verdict.get("launches", 0)) > 0


def _values(o: OccurrenceRow) -> dict[str, tuple[float, ...]]:
    values = (o.verdict or {}).get("values") or {}
    return {str(m): tuple(float(x) for x in v) for m, v in values.items()}


def means(o: OccurrenceRow) -> dict[str, float]:
    """Each metric's mean over the occurrence's launches (stored, or from its values)."""
    stored = (o.verdict or {}).get("means")
    if isinstance(stored, Mapping):
        return {str(m): float(v) for m, v in stored.items() if isinstance(v, int | float)}
    return {m: statistics.fmean(v) for m, v in _values(o).items() if v}


def _span(numbers: Sequence[int]) -> str:
    return f"#{numbers[0]}" if len(numbers) == 1 else f"#{numbers[0]}-#{numbers[-1]}"


@dataclass(frozen=True)
class History:
    """What judging one occurrence reads, bounded whatever the watch's age: the newest
    ``WINDOW`` occurrences before it (oldest first), the ``first`` baseline's pooled
    occurrences and the pinned one."""

    window: Sequence[OccurrenceRow]
    pool: Sequence[OccurrenceRow] = ()
    pinned: OccurrenceRow | None = None

    @property
    def last(self) -> Mapping[str, Any]:
        """The newest judged occurrence's document ({} when there is none)."""
        judged = [o for o in self.window if o.verdict is not None]
        return judged[-1].verdict or {} if judged else {}


def pool_numbers(history_last: Mapping[str, Any]) -> list[int] | None:
    """The ``first`` baseline pool the newest judged occurrence left (None for a document
    written before pools: the caller looks for the occurrence judged ``baseline``)."""
    pool = history_last.get("pool")
    return [int(n) for n in pool] if isinstance(pool, list) else None


Before = Callable[[int, int], Sequence[OccurrenceRow]]  # (before, limit): newest, oldest first
After = Callable[[int, int], Sequence[OccurrenceRow]]  # (after, limit): oldest first


def build_history(spec: WatchSpec, number: int, before: Before, after: After) -> History:
    """The bounded ``History`` of occurrence ``number``, read through ``before`` and ``after``
    (the store's pages; lists in the detection benchmark): at most ``WINDOW`` occurrences, the
    pool and the pinned one."""
    window = before(number, WINDOW)
    pinned = None
    if spec.baseline == "pinned" and spec.pin < number:
        pinned = next(iter(after(spec.pin - 1, 1)), None)
    pool: list[OccurrenceRow] = []
    if spec.baseline == "first":
        judged = [o for o in window if o.verdict is not None]
        numbers = pool_numbers(judged[-1].verdict or {}) if judged else []
        if numbers is None:  # written before pools: the occurrence judged "baseline"
            early = after(0, 50)
            found = [o.number for o in early if (o.verdict or {}).get("verdict") == BASELINE]
            numbers = found[:1]
        if numbers:
            rows = after(min(numbers) - 1, max(numbers) - min(numbers) + 1)
            pool = [o for o in rows if o.number in numbers]
    return History(window, pool, pinned)


@dataclass(frozen=True)
class _Choice:
    baseline: Occurrence | None  # None: this occurrence is (part of) the baseline
    pool: list[int]  # the ``first`` pool after this occurrence
    against: list[int]  # the occurrences the baseline pools
    reason: str = ""
    noisy: str = ""  # why the baseline is too noisy to judge against (judged undecided)
    wait: bool = False  # no baseline yet and not one itself (before a pinned one)


def _as_baseline(rows: Sequence[OccurrenceRow], metrics: Sequence[str]) -> Occurrence:
    return Occurrence(
        rows[-1].number,
        rows[-1].started_at,
        pooled([_values(o) for o in rows], metrics),
        dict((rows[0].verdict or {}).get("provenance") or {}),
    )


def _counts(metrics: Sequence[str]) -> list[str]:
    return [m for m in metrics if metric_of(m).unit == COUNTS]


def _choose(spec: WatchSpec, number: int, history: History) -> _Choice:
    metrics, counts = spec.metrics, _counts(spec.metrics)
    if spec.baseline == "pinned":
        pinned = history.pinned
        if number == spec.pin:
            return _Choice(None, [], [])  # the pinned baseline itself
        if pinned is None or not _launched(pinned):
            return _Choice(
                None,
                [],
                [],
                f"the pinned baseline (occurrence {spec.pin}) has no result yet",
                wait=True,
            )
        why = unusable(_values(pinned), counts)
        return _Choice(_as_baseline([pinned], metrics), [], [pinned.number], noisy=why)
    if spec.baseline == "previous":
        earlier = [o for o in reversed(history.window) if _launched(o)]
        if not earlier:
            return _Choice(None, [], [])  # the first: the next one's baseline
        usable = next((o for o in earlier if not unusable(_values(o), counts)), None)
        if usable is None:
            why = unusable(_values(earlier[0]), counts)
            return _Choice(_as_baseline([earlier[0]], metrics), [], [earlier[0].number], noisy=why)
        reason = ""
        if usable is not earlier[0]:
            why = unusable(_values(earlier[0]), counts)
            reason = (
                f"the previous occurrence #{earlier[0].number} is too noisy to judge against "
                f"({why}); judged against #{usable.number}, the latest that is not"
            )
        return _Choice(_as_baseline([usable], metrics), [], [usable.number], reason)
    pool = [o for o in history.pool if _launched(o)]
    numbers = [o.number for o in pool]
    if not pool:
        return _Choice(None, [number], [])  # the first of the pool
    action, why = decide([_values(o) for o in pool], metrics, counts)
    if action == USE:
        return _Choice(_as_baseline(pool, metrics), numbers, numbers)
    if action == POOL:
        return _Choice(
            None, [*numbers, number], [], f"pooled into the baseline with {_span(numbers)} ({why})"
        )
    return _Choice(
        None,
        [number],
        [],
        f"the baseline {_span(numbers)} stayed too noisy to judge against after {MAX_POOL} "
        f"occurrences ({why}); a new baseline starts here",
    )


def _current(
    spec: WatchSpec, number: int, values: dict[str, list[float]], history: History, after: int
) -> tuple[dict[str, tuple[float, ...]], str]:
    """The current side: this occurrence's launches; with ``launches: 1``, pooled with the
    occurrences before it (after the baseline, up to ``REPLICATES``) and said so."""
    current = {m: tuple(v) for m, v in values.items()}
    if spec.launches != 1:
        return current, ""
    joined = [number]
    for o in reversed(history.window):
        if len(joined) >= REPLICATES or o.number <= after or not _launched(o):
            break
        if (o.verdict or {}).get("verdict") == BASELINE:
            break
        joined.append(o.number)
        for m, v in _values(o).items():
            current[m] = current.get(m, ()) + v
    if len(joined) == 1:
        return current, ""
    return current, f"launches: 1: judged over {_span(sorted(joined))} pooled as replicates"


def _window_marks(
    spec: WatchSpec, history: History, number: int, started_at: float, now: Mapping[str, float]
) -> list[dict[str, Any]]:
    rows = [o for o in history.window if _launched(o)][-(WINDOW - 1) :]
    found = []
    for metric in spec.metrics:
        series = [(o.number, o.started_at, means(o).get(metric)) for o in rows]
        series.append((number, started_at, now.get(metric)))
        clean = [(n, t, v) for n, t, v in series if v is not None]
        found += marks(clean, metric, spec.margin, metric_of(metric).higher_is_better)
    return found


def judge(
    spec: WatchSpec,
    occurrence: OccurrenceRow,
    found: tuple[dict[str, list[float]], dict[str, Any], int],
    launches_total: int,
    history: History,
) -> dict[str, Any]:
    """The verdict document of ``occurrence`` (see the module's docstring)."""
    values, provenance, launches = found
    last = history.last
    states = {m: MetricState.from_dict((last.get("state") or {}).get(m)) for m in spec.metrics}
    record: dict[str, Any] = {
        "values": values,
        "means": {m: statistics.fmean(v) for m, v in values.items() if v},
        "provenance": provenance,
        "launches": launches,
        "launches_total": launches_total,
        "baseline": None,
        "baseline_pool": [],
        "pool": pool_numbers(last) or [o.number for o in history.pool],
        "method": "",
        "confidence": None,
        "metrics": [],
        "changes": [],
        "reason": "",
        "state": {m: s.to_dict() for m, s in states.items()},
        "change_points": [],
    }
    if launches == 0:  # the state holds: nothing was seen
        return {**record, "verdict": "undecided", "reason": "no launch of it succeeded"}
    choice = _choose(spec, occurrence.number, history)
    record["pool"] = choice.pool
    points = _window_marks(spec, history, occurrence.number, occurrence.started_at, record["means"])
    record["change_points"] = points
    if choice.baseline is None:
        verdict = UNDECIDED if choice.wait else BASELINE
        verdicts = dict.fromkeys(spec.metrics, verdict)
        doc = {**record, "verdict": verdict, "reason": choice.reason}
    else:
        current, pooled_note = _current(
            spec, occurrence.number, values, history, choice.against[-1]
        )
        missing = [m for m in spec.metrics if not values.get(m)]
        reasons = {m: f"no launch reported {m}" for m in missing}
        if choice.noisy:
            noisy = (
                f"the baseline {_span(choice.against)} is too noisy to judge against "
                f"({choice.noisy})"
            )
            reasons.update({m: noisy for m in spec.metrics if m not in reasons})
        now = Occurrence(occurrence.number, occurrence.started_at, current, provenance)
        before = choice.baseline
        judgement = judge_occurrence(now, before, spec.metrics, spec.margin, reasons)
        verdicts = {str(r["metric"]): str(r["verdict"]) for r in judgement["metrics"]}
        doc = {
            **record,
            "verdict": judgement["verdict"],
            "baseline": choice.against[0],
            "baseline_pool": choice.against,
            "method": judgement.get("method", ""),
            "confidence": judgement.get("confidence"),
            "metrics": judgement.get("metrics", []),
            "changes": provenance_changes(provenance, before.provenance),
            "reason": "; ".join(r for r in (choice.reason, pooled_note) if r),
        }
    for metric in spec.metrics:
        newest = max(
            (p for p in points if p["metric"] == metric),
            key=lambda p: p["occurrence"],
            default=None,
        )
        observed = Observation(
            occurrence.number,
            verdicts.get(metric, BASELINE),
            choice.against[-1] if choice.against else 0,
            newest["occurrence"] if newest else 0,
            newest["shift"] if newest else "",
        )
        states[metric] = step(states[metric], observed)
    doc["state"] = {m: s.to_dict() for m, s in states.items()}
    return doc
