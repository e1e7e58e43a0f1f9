"""The controller's control loop: poll hosts, schedule, dispatch, follow attempts — one tick at
a time in one thread. A tick only starts agent calls (``InFlight``: one per host poll or
attempt, each with its own deadline) and never waits for one, so a hung host delays only
itself; the calls write what they learn through the store's compare-and-set methods."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from tunelab.controller.dispatch import AttemptDriver
from tunelab.controller.guard import error_line
from tunelab.controller.hosts import HostMonitor
from tunelab.controller.inflight import InFlight
from tunelab.controller.scheduler import Placed, Scheduler
from tunelab.controller.slurm.driver import SlurmDriver
from tunelab.controller.store import FencingToken, StoreError

log = structlog.get_logger(__name__)


class ControlLoop:
    def __init__(
        self,
        monitor: HostMonitor,
        scheduler: Scheduler,
        driver: AttemptDriver,
        *,
        tick: float = 0.5,
        attempt_poll_interval: float = 2.0,
        workers: int = 32,
        on_pass: Callable[[float], None] = lambda seconds: None,
        searches: Callable[[FencingToken], int] = lambda turn: 0,
        watches: Callable[[FencingToken], int] = lambda turn: 0,
        slurm: SlurmDriver | None = None,
    ) -> None:
        self._slurm = slurm
        self._monitor = monitor
        self._scheduler = scheduler
        self._driver = driver
        self._tick = tick
        self._attempt_poll = attempt_poll_interval
        self.calls = InFlight(workers)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._force_host_poll = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-loop", daemon=True)
        self._last_drive = 0.0
        self._on_pass = on_pass
        self._searches = searches  # queues the next trials of running searches (search/driver)
        self._watches = watches  # queues due occurrences, judges ended ones (watches/driver)
        self._store_error = ""
        self._tick_error = ""
        self.ticks_failed = 0  # ticks in a row that raised past every object's guard

    def start(self) -> None:
        self._thread.start()

    def wake(self, poll_hosts: bool = False) -> None:
        """Run a tick now (after a submit, a cancel, a new host)."""
        if poll_hosts:
            self._force_host_poll.set()
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(10)
        self.calls.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick_once()
                if self._store_error or self._tick_error:
                    log.info("control_tick_recovered", after=self._store_error or self._tick_error)
                    self._store_error, self._tick_error, self.ticks_failed = "", "", 0
            except StoreError as exc:  # the database is away: say which and why (once), retry
                if str(exc) != self._store_error:
                    self._store_error = str(exc)
                    log.error("control_tick_failed", error=self._store_error)
            except Exception as exc:  # a bug outside every object's step: bounded, counted
                self._tick_failed(exc)
            self._wake.wait(self._tick)
            self._wake.clear()

    def _tick_failed(self, exc: Exception) -> None:
        """One line per new error, then at the 2nd, 4th, 8th... failure in a row (the
        traceback once), not 3 KB twice a second."""
        self.ticks_failed += 1
        line = error_line(exc)
        if line != self._tick_error:
            self._tick_error = line
            log.error("control_tick_failed", error=line, failures=self.ticks_failed, exc_info=exc)
        elif self.ticks_failed & (self.ticks_failed - 1) == 0:
            log.error("control_tick_failed", error=line, failures=self.ticks_failed)

    def tick_once(self) -> None:
        """With several controllers on one database, one of them ticks at a time (it polls,
        schedules and drives the attempts); the others serve reads and take submissions."""
        with self._scheduler.turn() as turn:
            if turn is not None:
                self._tick_body(turn)

    def _tick_body(self, turn: FencingToken) -> None:
        """Hosts, then the scheduling pass and the attempts, then the per-object steps (each
        guarded: guard.py), so no watch, search or pool can keep the queue from moving."""
        force = self._force_host_poll.is_set()
        self._force_host_poll.clear()
        self._monitor.poll_due(self.calls, force=force)
        started = time.perf_counter()
        sending = 0.0  # time in dispatch_new, inside the pass: not the pass's own cost

        def dispatch(placed: Placed) -> None:
            nonlocal sending
            began = time.perf_counter()
            self._driver.dispatch_new(placed, self.calls)
            sending += time.perf_counter() - began

        # the tick's one turn, taken once and passed on; each committed chunk is sent at once
        created = self._scheduler.pass_once(turn, dispatch)
        self._on_pass(time.perf_counter() - started - sending)
        now = time.monotonic()
        due = now - self._last_drive >= self._attempt_poll
        if due:
            self._last_drive = now
            self._driver.drive_all(self.calls)
        if self._slurm is not None and (due or created):
            self._slurm.tick(turn)  # one squeue; submits this pass's Slurm attempts
        queued = self._searches(turn)  # the search step writes under the tick's turn
        queued += self._watches(turn)  # under the turn's fence, like the pass's own writes
        if queued:
            self._wake.set()  # their experiments are placed by the next pass, at once
