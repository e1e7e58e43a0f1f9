"""Driving attempts placed on Slurm pools: one job per attempt, Slurm's queue as the truth.

Each tick reads Slurm's queue once (``squeue``) and settles every live attempt on a pool:

- DISPATCHING with no job recorded: a job named after the attempt already in the queue is
  adopted (the controller died between ``sbatch`` and its commit); else the job is submitted
  and its id committed with the move to STARTING. So a restart never submits twice.
- in the queue, pending: the attempt says "queued at Slurm" with Slurm's reason (``%r``).
- gone from the queue and no final report: LOST (retried per ``max_attempts``) with Slurm's
  end state and exit code as the reason; CANCELLED where a cancel was asked (``scancel``).

The job's ``tunelab-agent run-once`` reports the run with ``ReportRun``; :meth:`report` applies
it through the same code that follows agents' runs (:meth:`AttemptDriver.apply_run`), and
refuses a report whose attempt is already over (fenced, LOST, finished).

Errors::

    BadReportToken      the report's token is not its attempt's          UNAUTHENTICATED
    ReportRefused       the attempt is over: its run's reports count nowhere  FAILED_PRECONDITION
"""

from __future__ import annotations

import hashlib
import hmac
import re
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from google.protobuf import json_format

from tunelab.controller.dispatch import AttemptDriver
from tunelab.controller.guard import StepGuard
from tunelab.controller.runwire import run_report
from tunelab.controller.slurm import folder as slurmfolder
from tunelab.controller.slurm.commands import (
    PENDING_STATES,
    SCHEME,
    QueuedJob,
    SlurmCli,
    SlurmError,
    SlurmPoolConfig,
    is_slurm,
    sbatch_args,
)
from tunelab.controller.spec.render import to_run_spec
from tunelab.controller.states import AttemptState, HostState
from tunelab.controller.store import (
    AttemptRow,
    ExperimentRow,
    FencingToken,
    HostRow,
    StoreConflict,
    StoreFenced,
)
from tunelab.controller.store.core import SqlStore
from tunelab.v1 import controller_pb2

log = structlog.get_logger(__name__)
A = AttemptState
PARTITION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class BadReportToken(PermissionError):
    """The report's token is not its attempt's (or there is no such attempt)."""


class ReportRefused(RuntimeError):
    """The attempt is over; the run that reports it was fenced."""


class SlurmDriver:
    def __init__(
        self,
        store: SqlStore,
        attempts: AttemptDriver,
        cli: SlurmCli,
        jobs_dir: Path,
        report_address: str,
        agent_command: str = "tunelab-agent",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._attempts = attempts
        self._cli = cli
        self._dir = jobs_dir
        self._report_address = report_address
        self._agent = shlex.split(agent_command)
        self._clock = clock
        self._cancelled: set[str] = set()  # job ids scancel was sent for, this process
        self._reported: set[str] = set()  # attempts whose job has reported, this process
        self._key: bytes | None = None
        self._key_lock = threading.Lock()
        self.submitted = 0
        self.guard = StepGuard(store, "pool", clock)

    # --- tokens ------------------------------------------------------------------------------

    def _report_key(self) -> bytes:
        with self._key_lock:  # the loop's first submit and a gRPC thread's report may meet
            return self._load_key()

    def _load_key(self) -> bytes:
        if self._key is None:
            self._key = slurmfolder.load_key(self._dir)  # UntrustedJobsFolder unless ours
        return self._key

    def check_folder(self) -> None:
        """Refuse (UntrustedJobsFolder, one line) a jobs folder or key that is not ours."""
        slurmfolder.check(self._dir)

    def token(self, attempt_id: str) -> str:
        """The attempt's report token: an HMAC of its id (nothing secret goes to the store)."""
        return hmac.new(self._report_key(), attempt_id.encode(), hashlib.sha256).hexdigest()

    def pools(self) -> dict[str, dict[str, Any]]:
        """Every pool's sbatch settings, by name."""
        return dict(self._store.slurm_pools())

    def add_pool(self, request: controller_pb2.AddHostRequest, now: float) -> HostRow:
        """A pool is kept only where the jobs folder is ours (a controller started with no
        pool and someone else's folder runs; its first pool is refused, naming the fix)."""
        try:
            self.check_folder()
        except slurmfolder.UntrustedJobsFolder as exc:
            raise SlurmError(str(exc)) from None
        return pool_host(self._store, self._cli, request, now)

    def job_folder(self, attempt_id: str) -> Path:
        """The attempt's job folder: runspec.json, token, job.sh, job.log, server/bench logs."""
        return self._dir / attempt_id

    # --- the tick ----------------------------------------------------------------------------

    def tick(self, fence: FencingToken) -> None:
        """Settle every live attempt on a pool: one ``squeue`` for all of them. The loop calls
        this after a pass that placed attempts and every attempt poll interval, so Slurm's
        controller sees one squeue per interval however many jobs there are. ``fence`` is the
        tick's scheduling turn: the job bookkeeping is written only while it holds (a
        controller that lost the turn meets StoreFenced and the loop retries next tick)."""
        hosts = {h.name for h in self._store.list_hosts() if is_slurm(h.address)}
        if not hosts:
            return
        live: dict[str, list[AttemptRow]] = {}
        for a in self._store.live_attempts():
            if a.host in hosts:
                live.setdefault(a.host, []).append(a)
        if not live:
            return
        pools = self._store.slurm_pools()
        try:
            queue = self._cli.queue()
        except SlurmError as exc:
            log.warning("squeue_failed", error=str(exc))
            return  # never decide LOST on a queue we could not read
        self.guard.each(
            hosts,
            lambda pool: self._settle_pool(live[pool], pools.get(pool), queue, fence),
            busy=list(live),
        )

    def _settle_pool(
        self,
        attempts: list[AttemptRow],
        config: dict[str, Any] | None,
        queue: dict[str, QueuedJob],
        fence: FencingToken,
    ) -> int:
        """One pool's step (guarded by the loop's guard: guard.py)."""
        if config is None:
            return 0
        pool = SlurmPoolConfig.from_dict(config)
        for attempt in attempts:
            experiment = self._store.get_experiment(attempt.experiment_id)
            if experiment is None:
                continue
            try:
                self._settle(attempt, experiment, pool, queue.get(attempt.id), fence)
            except SlurmError as exc:
                log.warning("slurm_call_failed", attempt=attempt.id, error=str(exc))
            except StoreFenced:
                raise  # the turn is lost: nothing more of this tick is written
            except StoreConflict:
                continue  # a report moved it meanwhile; the next tick sees it
        return 0

    def _settle(
        self,
        attempt: AttemptRow,
        experiment: ExperimentRow,
        pool: SlurmPoolConfig,
        queued: QueuedJob | None,
        fence: FencingToken,
    ) -> None:
        job = self._store.slurm_job(attempt.id)
        if job is None and queued is not None and attempt.state is A.DISPATCHING:
            self._store.record_slurm_job(
                attempt.id,
                attempt.host,
                queued.job_id,
                self._clock(),
                f"Slurm job {queued.job_id} found by its name after a restart: adopted, "
                "not submitted again",
                fence,
            )
            job = self._store.slurm_job(attempt.id)
        if job is None:
            if attempt.state is not A.DISPATCHING:
                return
            if experiment.cancel_requested:
                self._attempts.finish(attempt, A.CANCELLED, "cancelled before it was submitted")
                return
            self._submit(attempt, experiment, pool, fence)
            return
        if queued is not None:
            if experiment.cancel_requested and job.job_id not in self._cancelled:
                self._cli.cancel(job.job_id)
                self._cancelled.add(job.job_id)
            reason = queued.reason if queued.state in PENDING_STATES else ""
            if (queued.state, reason) != (job.slurm_state, job.slurm_reason):
                self._store.set_slurm_job_state(attempt.id, queued.state, reason, fence)
                if queued.state in PENDING_STATES:
                    said = f"queued at Slurm: job {job.job_id} {queued.state} ({reason})"
                    self._store.update_attempt(attempt.id, message=said)
                    self._store.record_event("attempt", attempt.id, said, attempt.state.value)
            return
        # gone from Slurm's queue: the job is over; its final report, if any, came first
        end = self._cli.job_end(job.job_id)
        fresh = self._store.get_attempt(attempt.id)
        if fresh is None or fresh.state.is_terminal():
            return
        said = f"Slurm job {job.job_id} ended {end.state or 'unknown to Slurm'}"
        if end.exit_code:
            said += f" (exit {end.exit_code})"
        if end.reason:
            said += f", reason {end.reason}"
        self._store.set_slurm_job_state(attempt.id, end.state, end.reason, fence)
        if experiment.cancel_requested:
            self._attempts.finish(fresh, A.CANCELLED, f"cancelled through tunelab: {said}")
        else:
            log_file = self._dir / attempt.id / "job.log"
            self._attempts.finish(fresh, A.LOST, f"{said} without a result (its log: {log_file})")

    def _submit(
        self,
        attempt: AttemptRow,
        experiment: ExperimentRow,
        pool: SlurmPoolConfig,
        fence: FencingToken,
    ) -> None:
        folder = self._dir / attempt.id
        spec_file = folder / "runspec.json"
        token_file = folder / "token"
        script = folder / "job.sh"
        argv = [
            *self._agent,
            "run-once",
            f"--spec={spec_file}",
            f"--attempt={attempt.id}",
            f"--controller={self._report_address}",
            f"--token-file={token_file}",
        ]
        try:
            token = self.token(attempt.id)
            with slurmfolder.attempt_folder(self._dir, attempt.id) as fd:
                run_spec = to_run_spec(experiment.spec, attempt.id, attempt.gpus)
                slurmfolder.write_file(
                    fd, spec_file.name, json_format.MessageToJson(run_spec).encode(), 0o600
                )
                slurmfolder.write_file(fd, token_file.name, token.encode(), 0o600)
                body = "#!/bin/sh\nexec " + shlex.join(argv) + "\n"
                slurmfolder.write_file(fd, script.name, body.encode(), 0o700)
        except slurmfolder.UntrustedJobsFolder as exc:
            log.error("slurm_jobs_folder_untrusted", attempt=attempt.id, error=str(exc))
            self._attempts.finish(attempt, A.FAILED_STARTUP, str(exc))
            return
        args = sbatch_args(
            pool, attempt.id, experiment.gpus_needed, str(folder / "job.log"), str(script)
        )
        try:
            job_id = self._cli.submit(args)
        except SlurmError as exc:
            if "did not answer" in str(exc):
                raise  # it may have been taken: the next tick looks for it by name
            self._attempts.finish(attempt, A.FAILED_STARTUP, f"Slurm refused the job: {exc}")
            return
        self.submitted += 1
        self._store.record_slurm_job(
            attempt.id,
            attempt.host,
            job_id,
            self._clock(),
            f"submitted to Slurm as job {job_id} (partition {pool.partition})",
            fence,
        )
        log.info("slurm_job_submitted", attempt=attempt.id, job=job_id)

    # --- reports from jobs -------------------------------------------------------------------

    def report(self, request: controller_pb2.ReportRunRequest) -> controller_pb2.ReportRunResponse:
        attempt = self._store.get_attempt(request.attempt_id)
        try:
            expected = self.token(request.attempt_id)
        except slurmfolder.UntrustedJobsFolder as exc:
            log.error("slurm_jobs_folder_untrusted", error=str(exc))
            raise BadReportToken(
                "the Slurm jobs folder is not trusted: no report is taken"
            ) from None
        if attempt is None or not hmac.compare_digest(expected, request.token):
            raise BadReportToken("the report's token does not match its attempt")
        if attempt.state.is_terminal():
            message = (
                f"fenced: a report from Slurm job {request.slurm_job_id or '?'} came after the "
                f"attempt was {attempt.state.value}; refused, its run was told to stop"
            )
            self._store.record_event("attempt", attempt.id, message, attempt.state.value)
            raise ReportRefused(f"attempt {attempt.id} is already {attempt.state.value}")
        host = self._store.get_host(attempt.host)
        if host is None:
            raise ReportRefused(f"attempt {attempt.id}: its pool was removed")
        if attempt.state is A.DISPATCHING and request.slurm_job_id:
            self._store.record_slurm_job(
                attempt.id,
                attempt.host,
                request.slurm_job_id,
                self._clock(),
                f"Slurm job {request.slurm_job_id} reported before its submission was recorded",
                None,  # a job's report runs in no turn: the move from DISPATCHING guards it
            )
            attempt = self._store.get_attempt(attempt.id) or attempt
        if attempt.id not in self._reported:
            self._reported.add(attempt.id)  # per process: a restart may note it once more
            self._store.record_event(
                "attempt",
                attempt.id,
                f"first report from Slurm job {request.slurm_job_id or '?'}: run-once is up",
                attempt.state.value,
            )
        self._attempts.apply_run(attempt, host, run_report(request.run), request.gpu_metrics)
        experiment = self._store.get_experiment(attempt.experiment_id)
        return controller_pb2.ReportRunResponse(
            cancel=experiment is not None and experiment.cancel_requested
        )


def pool_host(
    store: SqlStore, cli: SlurmCli, request: controller_pb2.AddHostRequest, now: float
) -> HostRow:
    """``hosts add-slurm``: check this controller can reach Slurm and the partition exists,
    then keep the pool as a host row (READY: Slurm's queue, not a poll, says what it can take)
    and its sbatch settings beside it."""
    pb = request.slurm
    if not PARTITION.match(pb.partition):
        raise SlurmError("partition: expected a Slurm partition name")
    if pb.gpus_per_node < 0 or pb.max_jobs < 0:
        raise SlurmError("gpus_per_node and max_jobs must be >= 0")
    missing = cli.missing()
    if missing:
        raise SlurmError(
            f"{', '.join(missing)} not found on the controller's PATH: the controller must run "
            "on a Slurm submit host (where sbatch, squeue, scontrol and scancel work)"
        )
    cli.check_partition(pb.partition)
    config = SlurmPoolConfig(
        partition=pb.partition,
        account=pb.account,
        qos=pb.qos,
        gpus_per_node=pb.gpus_per_node,
        time_limit=pb.time_limit,
        sbatch_args=tuple(pb.sbatch_args),
        max_jobs=pb.max_jobs or 16,
    )
    row = HostRow(
        name=request.name,
        address=f"{SCHEME}{pb.partition}",
        labels=dict(request.labels),
        metrics_url="",
        state=HostState.READY,
        state_reason=f"Slurm partition {pb.partition} (up to {config.max_jobs} jobs)",
        gpu_count=pb.gpus_per_node,
        added_at=now,
    )
    saved = store.add_host(row, replace=request.replace)
    store.set_slurm_pool(request.name, config.to_dict())
    store.update_host(request.name, gpu_count=pb.gpus_per_node)  # add_host keeps no GPU count
    return store.get_host(request.name) or saved
