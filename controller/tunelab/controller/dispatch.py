"""Driving attempts on agents: send StartRun, follow the run, cancel, and decide UNKNOWN / LOST.

Transport errors never end an attempt by themselves: an agent that does not answer makes it
UNKNOWN, and only a lease timeout (or an agent that answers but no longer has the run) makes it
LOST. StartRun is idempotent on the attempt id, so re-sending it after any doubt is safe.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Unpack

import grpc
import structlog

from tunelab.controller.agent_client import RunCalls
from tunelab.controller.aiocalls import StartRunCall
from tunelab.controller.hoststate import change_host, quarantine
from tunelab.controller.inflight import Answer, InFlight, attempt_key
from tunelab.controller.runreport import RunReport
from tunelab.controller.scheduler import Placed
from tunelab.controller.scrape import (
    MetricsScraper,
    ScrapeTarget,
    benchmark_energy,
    tokens_per_joule,
)
from tunelab.controller.slurm.commands import is_slurm
from tunelab.controller.spec.render import to_run_spec
from tunelab.controller.states import ATTEMPT_LIVE, AttemptState
from tunelab.controller.store import AttemptChange, AttemptRow, HostRow, Store, StoreConflict
from tunelab.controller.store.changes import AttemptFields
from tunelab.controller.timelines import keep_timeline

log = structlog.get_logger(__name__)
A = AttemptState

_Sent = tuple[AttemptRow, HostRow, dict[str, Any]]  # what a StartRun in flight was for
DETAIL_EVERY = 2.0  # seconds between writes of a starting server's moving load bar
TRANSPORT_ERRORS = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass(frozen=True)
class DriverSettings:
    unknown_after_failures: int = 3
    lease_timeout: float = 600.0  # UNKNOWN this long → LOST


class AttemptDriver:
    def __init__(
        self,
        store: Store,
        agents: RunCalls,
        scraper: MetricsScraper | None,
        settings: DriverSettings,
        clock: Callable[[], float] = time.time,
        on_dispatch_latency: Callable[[float], None] = lambda seconds: None,
        on_finished: Callable[[AttemptRow], None] = lambda attempt: None,
        on_agent_error: Callable[[str, str], None] = lambda host, code: None,
    ) -> None:
        self._store = store
        self._agents = agents
        self._scraper = scraper
        self._settings = settings
        self._clock = clock
        self._failures: dict[str, int] = {}
        self._fenced: set[str] = set()
        self._detail_at: dict[str, float] = {}  # attempt id -> when its server detail was written
        self._lock = threading.Lock()
        self._on_latency = on_dispatch_latency
        self._on_finished = on_finished
        self._on_agent_error = on_agent_error

    # --- entry points ------------------------------------------------------------------------

    def drive_all(self, calls: InFlight | None = None) -> None:
        """Start one look at every live attempt not already in flight (inline with no
        ``calls``); never waits for an agent."""
        hosts = {h.name: h for h in self._store.list_hosts()}
        for attempt in self._store.live_attempts():
            host = hosts.get(attempt.host)
            if host is not None and is_slurm(host.address):
                continue  # a Slurm job: the SlurmDriver follows it
            if calls is None:
                self.drive(attempt, host)
            else:
                calls.start(attempt_key(attempt.id), partial(self.drive, attempt, host))

    def drive(self, attempt: AttemptRow, host: HostRow | None) -> None:
        if host is None:
            self._finish(attempt, A.LOST, "its host was removed from the controller")
            return
        experiment = self._store.get_experiment(attempt.experiment_id)
        if experiment is None:
            return
        unacked = attempt.acked_at is None and A.DISPATCHING in (attempt.state, attempt.prev_state)
        try:
            if experiment.cancel_requested and unacked:
                # The agent may or may not have got StartRun: ask it to cancel, never start it.
                run = self._agents.cancel_run(host.address, host.token, attempt.id)
                self._apply(attempt, host, run)
                return
            if attempt.state is A.DISPATCHING and attempt.acked_at is None:
                self._start(attempt, host, experiment.spec)
                return
            run = self._agents.get_run(host.address, host.token, attempt.id)
        except grpc.RpcError as exc:
            if experiment.cancel_requested and unacked and exc.code() == grpc.StatusCode.NOT_FOUND:
                self._finish(attempt, A.CANCELLED, "cancelled before the agent started it")
                return
            self._on_error(attempt, host, exc, experiment.spec)
            return
        self._reset_failures(attempt.id)
        if experiment.cancel_requested and not run.terminal():
            self._cancel(attempt, host)
        self._apply(attempt, host, run)

    # --- start -------------------------------------------------------------------------------

    def _start(self, attempt: AttemptRow, host: HostRow, spec: dict[str, Any]) -> None:
        run_spec = to_run_spec(spec, attempt.id, attempt.gpus)
        sent = self._clock()
        run = self._agents.start_run(host.address, host.token, attempt.id, run_spec)
        self._record_starts([(attempt, host, run, sent, self._clock())])

    def _record_starts(
        self, started: list[tuple[AttemptRow, HostRow, RunReport, float, float]]
    ) -> None:
        """Record StartRun answers in one store commit: when each was sent and answered, and
        the move out of DISPATCHING; an answer that says more than "started" (a run already
        over, a kill that failed) is then applied as any look at a run is."""
        changes: list[AttemptChange] = []
        follow: list[tuple[AttemptRow, HostRow, RunReport]] = []
        for attempt, host, run, sent, answered in started:
            self._reset_failures(attempt.id)
            if attempt.dispatched_at is None:  # the first send, not a re-send after doubt
                self._on_latency(answered - attempt.created_at)
            fields: AttemptFields = {
                "dispatched_at": sent,
                "acked_at": answered,
                "agent_instance_id": run.agent_instance_id,
            }
            if run.progress is not None:
                fields["progress"] = attempt.progress = run.progress
            if run.provenance_json and attempt.provenance is None:
                fields["provenance"] = attempt.provenance = _provenance(run.provenance_json)
            attempt.dispatched_at, attempt.acked_at = sent, answered
            plain = (
                run.target is A.STARTING and attempt.state is A.DISPATCHING and not run.kill_failed
            )
            changes.append(
                AttemptChange(
                    attempt.id,
                    fields,
                    target=A.STARTING if plain else None,
                    expect=(A.DISPATCHING,),
                    message=run.message,
                )
            )
            if not plain:
                follow.append((attempt, host, run))
        self._store.change_attempts(changes)
        for attempt, host, run in follow:
            self._apply(attempt, host, run)

    def dispatch_new(self, placed: Placed, calls: InFlight | None = None) -> None:
        """Send StartRun for a pass's new attempts (the scheduler's decisions: each attempt,
        its spec, the hosts as the pass read them), all at once as gRPC futures (inline with no
        ``calls``). Every request is built before the first is sent, so the calls leave in one
        burst; the answers are recorded in batches as they arrive, and a host that does not
        answer holds up only its own attempt. A host removed since the pass read it is settled
        by the next ``drive_all``."""
        wave: list[tuple[str, _Sent]] = []
        for attempt in placed.attempts:
            host = placed.hosts.get(attempt.host)
            spec = placed.specs.get(attempt.experiment_id)
            if host is None or spec is None:
                continue  # removed meanwhile: the next drive_all settles it
            if is_slurm(host.address):
                continue  # submitted by the SlurmDriver
            if calls is None:
                self._dispatch_one(attempt, host, spec)
                continue
            wave.append((attempt_key(attempt.id), (attempt, host, spec)))
        if calls is not None and wave:
            calls.start_calls(wave, self._issue, partial(self._answered, self._clock()))

    def _issue(self, wave: list[_Sent]) -> list[Future[RunReport]]:
        return self._agents.start_runs(
            [
                StartRunCall(
                    host.address,
                    host.token,
                    attempt.id,
                    to_run_spec(spec, attempt.id, attempt.gpus),
                )
                for attempt, host, spec in wave
            ]
        )

    def _answered(self, sent: float, answers: list[Answer[_Sent, RunReport]]) -> None:
        started = []
        for answer in answers:
            attempt, host, spec = answer.context
            try:
                run = answer.future.result()
            except grpc.RpcError as exc:
                self._on_error(attempt, host, exc, spec)
                continue
            started.append((attempt, host, run, sent, answer.answered_at))
        self._record_starts(started)

    def _dispatch_one(self, attempt: AttemptRow, host: HostRow, spec: dict[str, Any]) -> None:
        try:
            self._start(attempt, host, spec)
        except grpc.RpcError as exc:
            self._on_error(attempt, host, exc, spec)

    # --- fencing -----------------------------------------------------------------------------

    def fence(self, host: HostRow, active_run_ids: list[str]) -> None:
        """An agent reports runs active: any whose attempt is already over (declared LOST while
        the agent was hung, then retried elsewhere) is cancelled there, with an event, so an
        experiment never has two runs going or two results."""
        for run_id in active_run_ids:
            attempt = self._store.get_attempt(run_id)
            if attempt is None or not attempt.state.is_terminal():
                continue  # not one of ours (a person's run), or live: the driver follows it
            try:
                self._agents.cancel_run(host.address, host.token, run_id)
            except grpc.RpcError as exc:
                log.warning(
                    "fence_cancel_failed", attempt=run_id, host=host.name, code=exc.code().name
                )
                continue
            with self._lock:
                first = run_id not in self._fenced
                self._fenced.add(run_id)
            if first:
                message = (
                    f"fenced: agent {host.name} still ran this attempt after it was declared "
                    f"{attempt.state.value}; the run was cancelled there and its result ignored"
                )
                self._store.record_event("attempt", run_id, message, attempt.state.value)
                log.warning("stale_run_fenced", attempt=run_id, host=host.name)

    # --- the Slurm path (slurm/driver.py) ------------------------------------------------------

    def apply_run(
        self, attempt: AttemptRow, host: HostRow, run: RunReport, gpu_metrics: str = ""
    ) -> None:
        """A run as a Slurm job's one-shot agent reported it: applied as any look at a run,
        its GPU figures (the job's own ``tunelab_gpu_*`` page) recorded as a scrape would be,
        before a final state takes the summary."""
        if gpu_metrics and self._scraper is not None:
            benchmarking = run.target is A.BENCHMARKING
            where = f"Slurm job of {attempt.id}"
            self._scraper.record_text(
                ScrapeTarget(attempt.id, where, attempt.gpus, benchmarking), gpu_metrics
            )
        self._apply(attempt, host, run)

    def finish(self, attempt: AttemptRow, target: AttemptState, message: str) -> None:
        self._finish(attempt, target, message)

    # --- follow ------------------------------------------------------------------------------

    def _apply(self, attempt: AttemptRow, host: HostRow, run: RunReport) -> None:
        target = run.target
        if run.progress is not None and run.progress != attempt.progress:
            self._store.update_attempt(attempt.id, progress=run.progress)
        if run.provenance_json and attempt.provenance is None:
            attempt.provenance = _provenance(run.provenance_json)
            self._store.update_attempt(attempt.id, provenance=attempt.provenance)
        detail = run.server_detail
        if (
            detail
            and attempt.state is A.STARTING
            and target in (None, A.STARTING)
            and self._detail_due(attempt, detail)
        ):
            # the server's phase and load progress, so show/ls/watch do not say "accepted"
            # through a 10-minute model load; transitions overwrite it with their own message
            self._store.update_attempt(attempt.id, message=detail)
            attempt.message = detail
        if run.kill_failed:
            self._quarantine(
                host, f"run {attempt.id}: a process survived the stop ladder ({run.message})"
            )
        if target is None or target is attempt.state:
            if attempt.state is A.UNKNOWN and attempt.prev_state is not None:
                self._move(attempt, attempt.prev_state, "the agent answers again")
            return
        self._scrape_window_edge(attempt, host, target)
        if target.is_terminal():
            result = json.loads(run.result_json) if run.result_json else None
            self._finish(
                attempt,
                target,
                run.message,
                result=with_failure(result, run),
                failure_reason=run.failure_reason,
                failure_line=run.failure_line if run.failure_reason else "",
            )
            return
        self._move(attempt, target, run.message)

    def _detail_due(self, attempt: AttemptRow, detail: str) -> bool:
        """A new phase is written at once; a moving bar at most every DETAIL_EVERY seconds (one
        store write per starting attempt per poll would be wasted on a count)."""
        if detail == attempt.message:
            return False
        now = self._clock()
        with self._lock:
            last = self._detail_at.get(attempt.id)
            new_phase = attempt.message.split(":", 1)[0] != detail.split(":", 1)[0]
            if last is not None and not new_phase and now - last < DETAIL_EVERY:
                return False
            self._detail_at[attempt.id] = now
            if len(self._detail_at) > 4096:  # bounded: finished attempts' entries are dropped
                self._detail_at.pop(next(iter(self._detail_at)))
        return True

    def _scrape_window_edge(self, attempt: AttemptRow, host: HostRow, target: AttemptState) -> None:
        """Scrape the host now when the benchmark window starts or ends (beside the scraper's
        interval), and when an attempt ends that was never scraped (its window fell between two
        polls): no attempt is left without GPU figures."""
        if self._scraper is None or not host.metrics_url:
            return
        starts = target is A.BENCHMARKING and attempt.state is not A.BENCHMARKING
        ends = attempt.state is A.BENCHMARKING and target is not A.BENCHMARKING
        unscraped = target.is_terminal() and not (self._scraper.snapshot(attempt.id) or {}).get(
            "samples"
        )
        if starts or ends or unscraped:
            self._scraper.scrape_target(
                ScrapeTarget(attempt.id, host.metrics_url, attempt.gpus, starts or ends)
            )

    def _move(self, attempt: AttemptRow, target: AttemptState, message: str) -> None:
        with contextlib.suppress(StoreConflict):  # another pass moved it; the next look sees it
            self._store.transition_attempt(
                attempt.id,
                target,
                [attempt.state],
                message=message,
                unknown_since=None,
                prev_state=None,
            )

    def _finish(
        self,
        attempt: AttemptRow,
        target: AttemptState,
        message: str,
        /,
        **fields: Unpack[AttemptFields],
    ) -> None:
        with self._lock:
            self._detail_at.pop(attempt.id, None)
        summary = self._scraper.finish(attempt.id) if self._scraper else None
        if summary is not None:
            energy = benchmark_energy(fields.get("result"), summary)
            if energy is not None:
                summary["benchmark_energy_used_joules"], summary["benchmark_energy_source"] = energy
            summary["tokens_per_joule"] = tokens_per_joule(fields.get("result"), summary)
            fields["gpu_summary"] = summary
        if "result" in fields:  # the timeline goes to its own table, before the attempt ends
            fields["result"] = keep_timeline(
                self._store, attempt.id, fields["result"], self._clock()
            )
        try:
            fields["message"] = message
            done, experiment = self._store.finish_attempt(
                attempt.id, target, ATTEMPT_LIVE, **fields
            )
        except StoreConflict:
            return
        log.info(
            "attempt_finished",
            attempt=attempt.id,
            state=target.value,
            experiment_state=experiment.state.value,
        )
        self._on_finished(done)

    def _cancel(self, attempt: AttemptRow, host: HostRow) -> None:
        try:
            self._agents.cancel_run(host.address, host.token, attempt.id)
        except grpc.RpcError as exc:
            log.warning("cancel_failed", attempt=attempt.id, error=exc.details())

    def _quarantine(self, host: HostRow, reason: str) -> None:
        if not host.quarantined:
            change_host(self._store, host.name, quarantine(reason))
            log.error("host_quarantined", host=host.name, reason=reason)

    # --- errors ------------------------------------------------------------------------------

    def _reset_failures(self, attempt_id: str) -> None:
        with self._lock:
            self._failures.pop(attempt_id, None)

    def _on_error(
        self, attempt: AttemptRow, host: HostRow, exc: grpc.RpcError, spec: dict[str, Any]
    ) -> None:
        code = exc.code()
        self._on_agent_error(host.name, code.name)
        if code == grpc.StatusCode.NOT_FOUND:
            if attempt.state is A.DISPATCHING or (
                attempt.state is A.UNKNOWN and attempt.prev_state is A.DISPATCHING
            ):
                self._start_quietly(attempt, host, spec)  # the agent never got it: send it again
                return
            self._finish(attempt, A.LOST, f"agent {host.name} no longer has the run")
            return
        if code == grpc.StatusCode.INVALID_ARGUMENT or code == grpc.StatusCode.FAILED_PRECONDITION:
            self._finish(attempt, A.FAILED_STARTUP, f"the agent refused the run: {exc.details()}")
            return
        if code in TRANSPORT_ERRORS or code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            self._count_failure(attempt, f"{code.name}: {exc.details()}")
            return
        log.warning("agent_call_failed", attempt=attempt.id, code=code.name, details=exc.details())
        self._count_failure(attempt, f"{code.name}: {exc.details()}")

    def _start_quietly(self, attempt: AttemptRow, host: HostRow, spec: dict[str, Any]) -> None:
        try:
            self._store.update_attempt(attempt.id, acked_at=None)
            fresh = self._store.get_attempt(attempt.id) or attempt
            self._start(fresh, host, spec)
        except grpc.RpcError as exc:
            self._count_failure(attempt, f"{exc.code().name}: {exc.details()}")

    def _count_failure(self, attempt: AttemptRow, reason: str) -> None:
        with self._lock:
            count = self._failures.get(attempt.id, 0) + 1
            self._failures[attempt.id] = count
        now = self._clock()
        if attempt.state is A.UNKNOWN:
            since = attempt.unknown_since or now
            if now - since >= self._settings.lease_timeout:
                self._finish(
                    attempt, A.LOST, f"no answer from the agent for {now - since:.0f} s ({reason})"
                )
            return
        if count >= self._settings.unknown_after_failures:
            with contextlib.suppress(StoreConflict):
                self._store.transition_attempt(
                    attempt.id,
                    A.UNKNOWN,
                    [attempt.state],
                    prev_state=attempt.state,
                    unknown_since=now,
                    message=f"agent not answering ({count} failures: {reason})",
                )


def _provenance(text: str) -> dict[str, Any]:
    """What the agent recorded about the run; kept as an error note when it is not an object."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"error": "the agent sent unreadable provenance"}


def with_failure(result: dict[str, Any] | None, run: RunReport) -> dict[str, Any] | None:
    """The result as stored: the failure reason is also kept in it (as before the attempt had
    its ``failure_reason`` column), so readers of exported results see it unchanged."""
    if not run.failure_reason:
        return result
    return {
        **(result or {}),
        "failure_reason": run.failure_reason,
        "failure_line": run.failure_line,
    }
