"""The watch driver, called once per control-loop tick inside the scheduling turn, with the
turn's fencing token: queue each due occurrence as an ordinary experiment group (the
submission's own expansion and rows), then judge each occurrence whose experiments all ended.

Queuing is one transaction under the fence that also moves the watch's ``next_due`` on from
the value read (``Store.start_occurrence``): two controllers on one database, or a pass that
raced a pause, queue it once. ``next_due`` jumps to the next slot after now, so a controller
that was down for several slots runs one occurrence when it is back, not one per slot missed.
Occurrences of a watch are judged in order (``previous`` needs its predecessor's verdict), and
one is queued only when the previous one is judged: a watch whose runs take longer than its
period never piles occurrences up in the queue (the due slot waits, then runs once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from tunelab.controller.guard import StepGuard
from tunelab.controller.spec.expand import expand_text
from tunelab.controller.spec.limits import DEFAULT_LIMITS, SpecLimits
from tunelab.controller.store.base import Store, StoreConflict, StoreFenced
from tunelab.controller.store.models import FencingToken
from tunelab.controller.store.watch_models import WATCH_ACTIVE, OccurrenceRow, WatchRow
from tunelab.controller.submission import experiment_rows, new_group
from tunelab.controller.watches.figures import figures
from tunelab.controller.watches.judging import History, build_history, judge
from tunelab.controller.watches.spec import WatchSpec

log = structlog.get_logger(__name__)
Verdicts = Callable[[WatchRow, OccurrenceRow, dict[str, Any]], None]


def _ignore(watch: WatchRow, occurrence: OccurrenceRow, verdict: dict[str, Any]) -> None:
    return None


class WatchDriver:
    no_hook = staticmethod(_ignore)

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float],
        on_verdict: Verdicts = _ignore,
        limits: SpecLimits = DEFAULT_LIMITS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._on_verdict = on_verdict
        self._limits = limits
        self.guard = StepGuard(store, "watch", clock)

    def tick(self, fence: FencingToken) -> int:
        """Occurrences queued this tick (verdicts are written too). Each watch's step is
        guarded (guard.py): one that raises marks that watch, never the tick."""
        watches = {w.name: w for w in self._store.list_watches()}
        pending: dict[str, list[OccurrenceRow]] = {}
        for o in self._store.unjudged_occurrences():
            pending.setdefault(o.watch, []).append(o)
        now = self._clock()
        busy = [
            name
            for name, w in watches.items()
            if name in pending or (w.state == WATCH_ACTIVE and w.next_due <= now)
        ]
        return self.guard.each(
            watches, lambda name: self._step(watches[name], pending.get(name, []), fence), busy
        )

    def _step(self, watch: WatchRow, pending: list[OccurrenceRow], fence: FencingToken) -> int:
        if pending:
            self._judge_ended(watch, pending, fence)  # first: a verdict frees a slot
        now = self._clock()
        if watch.state == WATCH_ACTIVE and watch.next_due <= now:
            return self._queue(watch, now, fence)
        return 0

    def _queue(self, watch: WatchRow, now: float, fence: FencingToken) -> int:
        spec = WatchSpec.from_dict(watch.spec)
        # a SpecError here (the controller's limits were lowered since the watch was added)
        # is the watch's: the guard marks it for `watch show` and tries again with back-off
        expanded = expand_text(watch.base_yaml, f"watch {watch.name}", self._limits)
        latest = self._store.latest_occurrences(watch.name, 1)
        if latest and latest[0].verdict is None:
            return 0  # the previous one still runs: this slot waits for it (and runs once)
        number = latest[0].number + 1 if latest else 1
        group = new_group()
        occurrence = OccurrenceRow(watch.name, number, group, watch.next_due, now)
        next_due = spec.next_due(now, watch.created_at)
        try:
            self._store.start_occurrence(
                occurrence, experiment_rows(expanded, group, now), next_due, fence
            )
        except StoreFenced:
            raise
        except StoreConflict as exc:  # queued by another pass, paused or removed meanwhile
            log.info("watch_occurrence_skipped", watch=watch.name, why=str(exc))
            return 0
        log.info(
            "watch_occurrence_queued",
            watch=watch.name,
            occurrence=number,
            group=group,
            next_due=next_due,
        )
        return 1

    def _judge_ended(
        self, watch: WatchRow, pending: list[OccurrenceRow], fence: FencingToken
    ) -> None:
        for occurrence in sorted(pending, key=lambda o: o.number):
            if not self._judge_one(watch, occurrence, fence):
                break  # in order: a later one waits for this one's verdict

    def history(self, watch: WatchRow, number: int) -> History:
        """The bounded history occurrence ``number`` is judged with (``judging.History``)."""
        name = watch.name
        return build_history(
            WatchSpec.from_dict(watch.spec),
            number,
            lambda before, limit: self._store.occurrences_before(name, before, limit),
            lambda after, limit: self._store.watch_occurrences(name, after, limit),
        )

    def _judge_one(self, watch: WatchRow, occurrence: OccurrenceRow, fence: FencingToken) -> bool:
        experiments = self._store.group_experiments(occurrence.group)
        if not all(e.state.is_terminal() for e in experiments):
            return False  # checked first: a running occurrence costs one small read a tick
        history = self.history(watch, occurrence.number)
        if any(o.verdict is None for o in history.window):
            return False
        spec = WatchSpec.from_dict(watch.spec)
        attempts = self._store.attempts_for_many([e.id for e in experiments])
        found = figures(experiments, attempts, spec.metrics)
        verdict = judge(spec, occurrence, found, len(experiments), history)
        try:
            self._store.judge_occurrence(
                watch.name, occurrence.number, verdict, self._clock(), fence
            )
        except StoreFenced:
            raise
        except StoreConflict:  # judged by another pass meanwhile
            return True
        log.info(
            "watch_occurrence_judged",
            watch=watch.name,
            occurrence=occurrence.number,
            verdict=verdict["verdict"],
            baseline=verdict["baseline"],
        )
        self._on_verdict(watch, occurrence, verdict)
        return True
