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
                if self._store_error:
                    log.info("control_tick_recovered", after=self._store_error)
                    self._store_error = ""
            except StoreError as exc:  # the database is away: say which and why (once), retry
                if str(exc) != self._store_error:
                    self._store_error = str(exc)
                    log.error("control_tick_failed", error=self._store_error)
            except Exception:  # one bad tick must not stop the queue; it is logged in full
                log.exception("control_tick_failed")
            self._wake.wait(self._tick)
            self._wake.clear()

    def tick_once(self) -> None:
        """With several controllers on one database, one of them ticks at a time (it polls,
        schedules and drives the attempts); the others serve reads and take submissions."""
        with self._scheduler.turn() as turn:
            if turn is not None:
                self._tick_body(turn)

    def _tick_body(self, turn: FencingToken) -> None:
        force = self._force_host_poll.is_set()
        self._force_host_poll.clear()
        self._monitor.poll_due(self.calls, force=force)
        self._searches(turn)  # the search step writes under the tick's turn
        self._watches(turn)  # under the turn's fence, like the pass's own writes
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
        if self._slurm is not None and (due or created):
            self._slurm.tick(turn)  # one squeue; submits this pass's Slurm attempts
        if due:
            self._last_drive = now
            self._driver.drive_all(self.calls)
