"""Slurm as a kind of host: a pool's settings, and the Slurm commands the controller runs.

The controller must run on a Slurm submit host: ``sbatch``, ``squeue``, ``scontrol`` and
``scancel`` on its PATH, talking to the cluster (``SLURM_CONF`` as Slurm reads it). Every call
is an argv list with a deadline, never a shell. A pool is a host row whose address is
``slurm:<partition>``; its sbatch settings are kept beside it in the store.

Errors::

    SlurmError              a Slurm command failed or is missing; the message says which
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEME = "slurm:"
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel")
JOB_PREFIX = "tunelab-"
CALL_TIMEOUT = 30.0
# squeue's states that mean "not started yet" / "started"; anything else is on its way out
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"})


class SlurmError(RuntimeError):
    """A Slurm command failed or is missing; the message says which and why."""


def is_slurm(address: str) -> bool:
    return address.startswith(SCHEME)


@dataclass(frozen=True)
class SlurmPoolConfig:
    partition: str
    account: str = ""
    qos: str = ""
    gpus_per_node: int = 0
    time_limit: str = ""
    sbatch_args: tuple[str, ...] = ()
    max_jobs: int = 16

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["sbatch_args"] = list(self.sbatch_args)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SlurmPoolConfig:
        return cls(
            partition=str(values["partition"]),
            account=str(values.get("account", "")),
            qos=str(values.get("qos", "")),
            gpus_per_node=int(values.get("gpus_per_node", 0)),
            time_limit=str(values.get("time_limit", "")),
            sbatch_args=tuple(str(a) for a in values.get("sbatch_args", ())),
            max_jobs=int(values.get("max_jobs", 16)),
        )


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    name: str
    state: str  # squeue's %T: PENDING, RUNNING, COMPLETING, ...
    reason: str  # squeue's %r: Priority, Resources, QOSMaxGRESPerUser, None, ...


@dataclass(frozen=True)
class JobEnd:
    state: str  # COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, ...
    exit_code: str  # "0:0" (code:signal); "" when Slurm no longer knows the job
    reason: str = ""


@dataclass
class SlurmCli:
    """The Slurm commands, run with ``env`` (default: this process's environment)."""

    env: Mapping[str, str] | None = None
    timeout: float = CALL_TIMEOUT
    calls: list[str] = field(default_factory=list)  # argv[0] of each call, for tests/metrics

    def missing(self) -> list[str]:
        path = (self.env or os.environ).get("PATH")
        return [c for c in COMMANDS if shutil.which(c, path=path) is None]

    def _run(self, argv: Sequence[str]) -> str:
        self.calls.append(argv[0])
        try:
            done = subprocess.run(
                list(argv),
                env=dict(self.env) if self.env is not None else None,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{argv[0]} not found: run the controller on a Slurm submit host"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {self.timeout:.0f} s") from None
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(argv[:2])}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def submit(self, argv_tail: Sequence[str]) -> str:
        """``sbatch --parsable ...`` → the job id."""
        out = self._run(["sbatch", "--parsable", *argv_tail]).strip()
        job_id = out.split(";", 1)[0]  # "id;cluster" on a multi-cluster setup
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {out!r}, not a job id")
        return job_id

    def queue(self) -> dict[str, QueuedJob]:
        """This controller's jobs in Slurm's queue, by job name (the attempt id)."""
        return parse_queue(self._run(["squeue", "--me", "-h", "-o", QUEUE_FORMAT]))

    def job_end(self, job_id: str) -> JobEnd:
        """How a job that left the queue ended: ``scontrol show job`` (slurmctld keeps a job
        for MinJobAge after its end), else ``sacct`` where accounting is on, else the
        job-completion log where slurmctld writes one that this host can read; state "" when
        Slurm no longer knows the job."""
        try:
            end = parse_job_end(self._run(["scontrol", "show", "job", "-o", job_id]))
        except SlurmError:
            end = JobEnd("", "")
        if end.state:
            return end
        try:
            out = self._run(
                ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,Reason"]
            )
        except SlurmError:  # no accounting (or no sacct)
            out = ""
        counted = parse_sacct(out)
        return counted if counted.state else self.completion_log_end(job_id)

    def completion_log(self) -> Path | None:
        """The job-completion log slurmctld writes (``JobCompType=jobcomp/filetxt``), if any."""
        try:
            config = parse_config(self._run(["scontrol", "show", "config"]))
        except SlurmError:
            return None
        location = config.get("JobCompLoc", "")
        if config.get("JobCompType") != "jobcomp/filetxt" or not location.startswith("/"):
            return None
        return Path(location)

    def completion_log_end(self, job_id: str) -> JobEnd:
        """A job's end as the job-completion log has it (its last line for the job; the log's
        last 4 MiB are read), or state "" when there is no log or no line for it here."""
        path = self.completion_log()
        if path is None:
            return JobEnd("", "")
        try:
            with path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - COMPLETION_LOG_TAIL))
                text = log.read().decode("utf-8", errors="replace")
        except OSError:  # on slurmctld's host, not this one, or not readable by us
            return JobEnd("", "")
        return parse_jobcomp(text, job_id)

    def check_partition(self, partition: str) -> None:
        """Raises SlurmError naming the partition when Slurm does not know it, and saying so in
        one line when Slurm has no configuration here (the partition is not to blame then)."""
        try:
            self._run(["scontrol", "show", "partition", partition])
        except SlurmError as exc:
            if any(sign in str(exc) for sign in NO_CONFIG):
                raise SlurmError(
                    "Slurm has no configuration on the controller's host (scontrol: could not "
                    "establish a configuration source): run the controller on a Slurm submit "
                    "host, or point SLURM_CONF at its slurm.conf"
                ) from None
            raise SlurmError(f"partition {partition!r}: {exc}") from None

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id])


QUEUE_FORMAT = "%i|%j|%T|%r"
# what scontrol says (over several lines) when it finds no slurm.conf and no DNS SRV record
NO_CONFIG = ("configuration source", "fetch_config", "slurm.conf")
COMPLETION_LOG_TAIL = 4 << 20


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` → its ``Name = value`` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and " " not in name.strip():
            out[name.strip()] = value.strip()
    return out


def parse_jobcomp(text: str, job_id: str) -> JobEnd:
    """jobcomp/filetxt lines (``JobId=7 ... JobState=COMPLETED ... ExitCode=0:0``) → the last
    line's end for ``job_id``."""
    for line in reversed(text.splitlines()):
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if fields.get("JobId") == job_id and fields.get("JobState"):
            return JobEnd(fields["JobState"].split()[0], fields.get("ExitCode", ""), "")
    return JobEnd("", "")


def parse_queue(text: str) -> dict[str, QueuedJob]:
    """``squeue -h -o QUEUE_FORMAT`` → tunelab's jobs by attempt id; other users' jobs and
    lines that do not parse are left out."""
    jobs: dict[str, QueuedJob] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or not parts[1].startswith(JOB_PREFIX):
            continue
        job = QueuedJob(parts[0], parts[1], parts[2], parts[3])
        jobs[job.name.removeprefix(JOB_PREFIX)] = job
    return jobs


def parse_job_end(text: str) -> JobEnd:
    """``scontrol show job -o ID`` → its state, exit code and reason ("None" reads as "")."""
    fields = dict(w.split("=", 1) for w in text.split() if "=" in w)
    reason = fields.get("Reason", "")
    return JobEnd(
        fields.get("JobState", ""), fields.get("ExitCode", ""), "" if reason == "None" else reason
    )


def parse_sacct(text: str) -> JobEnd:
    """``sacct -n -P -X -o State,ExitCode,Reason`` → the allocation's end (``CANCELLED by 0``
    reads as CANCELLED)."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0]:
            reason = "" if parts[2] == "None" else parts[2]
            return JobEnd(parts[0].split()[0], parts[1], reason)
    return JobEnd("", "")


def sbatch_args(
    pool: SlurmPoolConfig,
    attempt_id: str,
    gpus: int,
    output: str,
    script: str,
) -> list[str]:
    """The sbatch flags for one attempt: the pool's settings, GPUs as GRES, the attempt id in
    the job name (how a restarted controller finds the job), output to a file."""
    argv = [
        f"--job-name={JOB_PREFIX}{attempt_id}",
        f"--partition={pool.partition}",
        f"--output={output}",
        "--nodes=1",
        "--ntasks=1",
        "--no-requeue",  # a retry is tunelab's decision (max_attempts), with a new attempt id
    ]
    if gpus:
        argv.append(f"--gres=gpu:{gpus}")
    if pool.account:
        argv.append(f"--account={pool.account}")
    if pool.qos:
        argv.append(f"--qos={pool.qos}")
    if pool.time_limit:
        argv.append(f"--time={pool.time_limit}")
    return [*argv, *pool.sbatch_args, script]
