"""The Slurm path's pure parts: sbatch flags, squeue/scontrol parsing, pools in the pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.unit.controller.test_store_scheduler import queue
from tunelab.cli.hosts_cmd import _slurm_time
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.slurm.commands import (
    JobEnd,
    QueuedJob,
    SlurmPoolConfig,
    is_slurm,
    parse_config,
    parse_job_end,
    parse_jobcomp,
    parse_queue,
    parse_sacct,
    sbatch_args,
)
from tunelab.controller.slurm.driver import SlurmDriver
from tunelab.controller.states import HostState
from tunelab.controller.store import HostRow, SqliteStore


def test_sbatch_flags_name_the_attempt_ask_gres_and_keep_the_pools_settings_in_order() -> None:
    pool = SlurmPoolConfig(
        "gpu", account="lab", qos="short", time_limit="2:00:00", sbatch_args=("--exclusive",)
    )
    argv = sbatch_args(pool, "x-1-a1", 2, "/jobs/x-1-a1/job.log", "/jobs/x-1-a1/job.sh")
    assert argv == [
        "--job-name=tunelab-x-1-a1", "--partition=gpu", "--output=/jobs/x-1-a1/job.log",
        "--nodes=1", "--ntasks=1", "--no-requeue", "--gres=gpu:2", "--account=lab",
        "--qos=short", "--time=2:00:00", "--exclusive", "/jobs/x-1-a1/job.sh",
    ]  # fmt: skip
    assert "--gres" not in " ".join(sbatch_args(SlurmPoolConfig("cpu"), "a", 0, "o", "s"))
    assert SlurmPoolConfig.from_dict(pool.to_dict()) == pool


def test_squeue_lines_become_our_jobs_by_attempt_with_slurms_reason() -> None:
    text = (
        "12|tunelab-x-1-a1|PENDING|Resources\n"
        "13|someone-elses-job|RUNNING|None\n"
        "14|tunelab-x-2-a1|RUNNING|None\n"
        "garbage line\n"
    )
    jobs = parse_queue(text)
    assert sorted(jobs) == ["x-1-a1", "x-2-a1"]
    assert (jobs["x-1-a1"].job_id, jobs["x-1-a1"].reason) == ("12", "Resources")


def test_scontrol_show_job_gives_the_end_state_exit_code_and_reason() -> None:
    text = "JobId=7 JobName=tunelab-a JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0 Other=x"
    end = parse_job_end(text)
    assert (end.state, end.exit_code, end.reason) == ("NODE_FAIL", "0:0", "NodeDown")
    assert parse_job_end("JobId=8 JobState=TIMEOUT Reason=None ExitCode=0:15").reason == ""
    assert parse_job_end("") == parse_job_end("slurm_load_jobs error: Invalid job id")


def test_time_limits_become_slurms_clock() -> None:
    assert _slurm_time("2h") == "2:00:00"
    assert _slurm_time("90m") == "1:30:00"
    assert _slurm_time("") == ""


def test_a_pool_takes_up_to_max_jobs_attempts_without_gpu_indices(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "controller.db")
    store.add_host(
        HostRow(name="pool", address="slurm:gpu", labels={"pool": "a"}, state=HostState.READY)
    )
    store.update_host("pool", gpu_count=8)
    assert is_slurm("slurm:gpu") and not is_slurm("gpu-a:50051")
    queue(store, gpus=8, n=5)
    scheduler = Scheduler(store, pools=lambda: {"pool": 3})
    first = scheduler.pass_once()
    assert len(first) == 3 and all(a.host == "pool" and a.gpus == [] for a in first)
    assert scheduler.pass_once() == []  # max_jobs reached: the rest wait
    store.close()


def test_sacct_gives_the_end_of_a_job_that_slurmctld_has_forgotten() -> None:
    end = parse_sacct("CANCELLED by 0|0:15|None\n")
    assert (end.state, end.exit_code, end.reason) == ("CANCELLED", "0:15", "")
    assert parse_sacct("OUT_OF_MEMORY|0:125|None").state == "OUT_OF_MEMORY"
    assert parse_sacct("").state == ""


def test_the_job_completion_log_gives_the_end_of_a_job_both_have_forgotten() -> None:
    log = (
        "JobId=7 UserId=root(0) GroupId=root(0) Name=tunelab-x-1-a1 JobState=FAILED "
        "Partition=gpu ExitCode=1:0\n"
        "JobId=8 UserId=root(0) GroupId=root(0) Name=tunelab-x-2-a1 JobState=CANCELLED by 0 "
        "Partition=gpu ExitCode=0:15\n"
        "JobId=7 UserId=root(0) GroupId=root(0) Name=tunelab-x-1-a1 JobState=NODE_FAIL "
        "Partition=gpu ExitCode=0:0\n"
    )
    assert parse_jobcomp(log, "7") == JobEnd("NODE_FAIL", "0:0", "")  # its last line
    assert parse_jobcomp(log, "8").state == "CANCELLED"
    assert parse_jobcomp(log, "9") == JobEnd("", "")
    config = parse_config(
        "JobCompLoc              = /var/log/slurm/jobcomp.log\nJobCompType = jobcomp/filetxt\n"
    )
    assert config == {"JobCompLoc": "/var/log/slurm/jobcomp.log", "JobCompType": "jobcomp/filetxt"}


class QueueOnly:
    """A SlurmCli whose queue is empty and whose sbatch answers job 42."""

    def queue(self) -> dict[str, QueuedJob]:
        return {}

    def submit(self, args: list[str]) -> str:
        return "42"


def test_a_pool_whose_step_fails_is_marked_and_the_other_pool_goes_on(tmp_path: Path) -> None:
    """Issue 45.1: each pool's step is guarded; a pool whose stored settings cannot be read
    (here: no partition) is marked for `hosts` and the other pool's attempt is submitted."""
    store = SqliteStore(tmp_path / "controller.db")
    for name in ("bad", "good"):
        store.add_host(HostRow(name=name, address=f"slurm:{name}", state=HostState.READY))
    store.set_slurm_pool("bad", {"max_jobs": 4})
    store.set_slurm_pool("good", SlurmPoolConfig("gpu").to_dict())
    ids = queue(store, n=2)
    attempts = [
        store.create_attempt(i, host, [], 1.0) for i, host in zip(ids, ("bad", "good"), strict=True)
    ]
    driver = SlurmDriver(
        store, cast(Any, None), cast(Any, QueueOnly()), tmp_path / "jobs", "127.0.0.1:1"
    )
    with store.scheduling_pass() as turn:
        assert turn is not None
        driver.tick(turn)
    assert driver.submitted == 1
    job = store.slurm_job(attempts[1].id)
    assert job is not None and job.job_id == "42"
    fault = store.step_faults("pool")["bad"]
    assert fault.failures == 1 and fault.error.startswith("KeyError: 'partition'"), fault
    store.close()
