"""E2E against a real single-node Slurm: the controller submits one job per attempt, the job's
``tunelab-agent run-once`` runs the simulator and reports back; outside kills, cancels, late
reports and a controller kill -9 are settled by Slurm's own account."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from tests.e2e.conftest import NVML_BUSY, Lab, sim_experiment
from tests.support.controller_proc import ControllerProcess
from tests.support.slurm import SlurmCluster, slurm_missing
from tunelab.controller.agent_client import GrpcAgentClient
from tunelab.controller.dispatch import AttemptDriver, DriverSettings
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.slurm.commands import SlurmCli
from tunelab.controller.slurm.driver import SlurmDriver, pool_host
from tunelab.controller.spec import expand_text
from tunelab.controller.states import ExperimentState
from tunelab.controller.store import ExperimentRow, FencingToken, SqliteStore
from tunelab.controller.store.models import selector_key
from tunelab.v1 import controller_pb2

X = controller_pb2


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    missing = slurm_missing()
    if missing:  # never a skip: `make deps` installs what these tests need
        pytest.fail(f"no real Slurm here: {missing}")
    cluster = SlurmCluster().start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def slurm(cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    cluster.run("scontrol", "update", "nodename=localhost", "state=resume", check=False)
    yield cluster
    for line in cluster.run("squeue", "-h", "-o", "%i").split():
        cluster.run("scancel", line, check=False)
    cluster.run("scontrol", "update", "nodename=localhost", "state=resume", check=False)


def start(lab: Lab, slurm: SlurmCluster) -> Any:
    controller = lab.start_controller(
        SLURM_CONF=str(slurm.conf),
        TUNELAB_CONTROLLER_SLURM_AGENT_COMMAND=f"{sys.executable} -m tunelab.agent",
        # the jobs inherit it (--export=ALL): run-once answers GPU queries from a real capture
        TUNELAB_AGENT_NVML_SNAPSHOT=str(NVML_BUSY),
    )
    added = controller.cli(
        "hosts", "add-slurm", "cluster", "--partition", "gpu", "--gpus-per-node", "4",
        "--time", "10m", "--label", "pool=slurm",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return controller


def spec(name: str, **overrides: Any) -> dict[str, Any]:
    return sim_experiment(name, host={"labels": {"pool": "slurm"}, "gpus": 1}, **overrides)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def jobs_named(slurm: SlurmCluster, attempt_id: str) -> list[str]:
    """Every job Slurm knows (queued or ended) with this attempt's name."""
    out = slurm.run("scontrol", "show", "job", "-o", check=False)
    return [
        line.split()[0].removeprefix("JobId=")
        for line in out.splitlines()
        if f"JobName=tunelab-{attempt_id} " in line
    ]


def attempt_state(attempt: X.Attempt) -> str:
    return X.AttemptState.Name(attempt.state).removeprefix("ATTEMPT_STATE_")


def experiment_state(experiment: X.Experiment) -> str:
    return X.ExperimentState.Name(experiment.state).removeprefix("EXPERIMENT_STATE_")


def test_a_matrix_runs_as_one_slurm_job_per_experiment_and_each_succeeds_once(
    lab: Lab, slurm: SlurmCluster
) -> None:
    controller = start(lab, slurm)
    hosts = controller.cli_json("hosts", "ls")
    assert hosts[0]["address"] == "slurm:gpu" and hosts[0]["state"] == "READY"
    done = lab.submit(spec("mx", matrix={"server.flags.--itl-ms": [4, 8]}), wait=True)
    assert [e["state"] for e in done] == ["SUCCEEDED", "SUCCEEDED"], done
    for experiment in done:
        (attempt,) = experiment["attempts"]
        assert attempt["host"] == "cluster"
        assert [p["concurrency"] for p in attempt["result"]["points"]] == [1, 4]
        # GPU figures from the job's own reports (the controller cannot scrape a node)
        gpu = attempt["gpu_summary"]
        assert gpu["samples"] >= 2 and gpu["mean_power_watts_total"] > 0, gpu
        (job,) = jobs_named(slurm, attempt["id"])

        # the job reports its result, then exits: Slurm says COMPLETED a moment later
        def completed(j: str = job) -> bool:
            return slurm.job_state(j) == "COMPLETED"

        wait_for(f"job {job} to complete", completed)
        # the job-completion log, read when scontrol and sacct have forgotten the job, says so
        log_end = SlurmCli(env=slurm.env()).completion_log_end(job)
        assert (log_end.state, log_end.exit_code) == ("COMPLETED", "0:0"), log_end
    # logs: the server's and the load generator's, copied to the job folder by run-once
    server_log = controller.cli("logs", done[0]["id"])
    assert server_log.returncode == 0 and "sim" in server_log.stdout, server_log.stderr
    bench_log = controller.cli("logs", done[0]["id"], "--bench", "--tail", "5")
    assert bench_log.returncode == 0 and bench_log.stdout.strip(), bench_log.stderr
    assert controller.cli("logs", done[0]["id"], "--job").returncode == 0
    attempts = done[0]["attempts"]

    # a late report (the attempt is over) is refused, and a forged token is not taken at all
    token = (controller.db.parent / "controller.db.slurm" / attempts[0]["id"] / "token").read_text()
    stub = controller.stub()
    late = X.ReportRunRequest(attempt_id=attempts[0]["id"], token=token)
    with pytest.raises(grpc.RpcError) as refused:
        stub.ReportRun(late, timeout=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    forged = X.ReportRunRequest(attempt_id=attempts[0]["id"], token="0" * 64)
    with pytest.raises(grpc.RpcError) as denied:
        stub.ReportRun(forged, timeout=10)
    assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert controller.experiment(done[0]["id"]).state == X.EXPERIMENT_STATE_SUCCEEDED


def test_scancel_from_outside_is_lost_and_retried_then_cancel_through_tunelab(
    lab: Lab, slurm: SlurmCluster
) -> None:
    controller = start(lab, slurm)
    slow = spec("slow", max_attempts=2)
    slow["server"]["flags"]["--startup-seconds"] = 60
    (submitted,) = lab.submit(slow)
    experiment_id = submitted["id"]

    def running_job() -> str:
        experiment = controller.experiment(experiment_id)
        if not experiment.attempts or attempt_state(experiment.attempts[-1]) != "STARTING":
            return ""
        jobs = jobs_named(slurm, experiment.attempts[-1].id)
        return jobs[0] if jobs and slurm.job_state(jobs[0]) == "RUNNING" else ""

    first_job = wait_for("the first job to run", running_job)
    first = controller.experiment(experiment_id).attempts[0].id
    slurm.run("scancel", first_job)  # from outside tunelab: the attempt is LOST, then retried
    experiment = wait_for(
        "a retry",
        lambda: (e := controller.experiment(experiment_id)) and len(e.attempts) == 2 and e,
    )
    lost = experiment.attempts[0]
    assert attempt_state(lost) == "LOST"
    assert f"Slurm job {first_job} ended CANCELLED" in lost.message
    second_job = wait_for("the retry's job to run", running_job)
    assert second_job != first_job and jobs_named(slurm, first) == [first_job]

    cancelled = controller.cli("cancel", experiment_id)
    assert cancelled.returncode == 0, cancelled.stderr
    final = wait_for(
        "the cancel",
        lambda: (
            (e := controller.experiment(experiment_id)).state == X.EXPERIMENT_STATE_CANCELLED and e
        ),
    )
    assert attempt_state(final.attempts[1]) == "CANCELLED"
    # scancel (CANCELLED), or the run stopped on the report's answer and run-once exited 1
    # (FAILED: "the run did not succeed"); either way the job ends and nothing is left running
    wait_for(
        "the retry's job to end",
        lambda: slurm.job_state(second_job) in ("CANCELLED", "FAILED"),
    )
    assert len(final.attempts) == 2


def test_kill9_while_pending_at_slurm_then_restart_submits_nothing_twice(
    lab: Lab, slurm: SlurmCluster
) -> None:
    controller = start(lab, slurm)
    slurm.run("scontrol", "update", "nodename=localhost", "state=drain", "reason=e2e-drain")
    (submitted,) = lab.submit(spec("pending"))
    experiment_id = submitted["id"]

    def slurms_reason() -> tuple[str, str] | None:
        """(job, reason) once `show` gives the reason squeue gives for the job, and it is one."""
        shown = re.search(
            r"queued at Slurm: job (\d+) PENDING \((.*)\)$",
            controller.cli("show", experiment_id).stdout,
            re.MULTILINE,
        )
        if shown is None or shown[2] in ("", "None"):  # "None" until Slurm's scheduler looks
            return None
        said = slurm.run("squeue", "-h", "-j", shown[1], "-o", "%r", check=False).strip()
        return (shown[1], shown[2]) if said == shown[2] else None

    job, reason = wait_for("Slurm's pending reason", slurms_reason)
    # the drained node is why: Slurm words it by version ("ReqNodeNotAvail, UnavailableNodes:…",
    # "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions")
    assert re.search(r"ReqNodeNotAvail|Nodes required|DRAIN|Resources", reason, re.I), reason
    attempt_id = controller.experiment(experiment_id).attempts[0].id
    assert jobs_named(slurm, attempt_id) == [job]

    controller.kill9()
    controller.start()
    time.sleep(1.0)  # a few ticks of the restarted controller while the job still pends
    assert jobs_named(slurm, attempt_id) == [job]
    slurm.run("scontrol", "update", "nodename=localhost", "state=resume")
    final = wait_for(
        "the run",
        lambda: (
            (e := controller.experiment(experiment_id)).state == X.EXPERIMENT_STATE_SUCCEEDED and e
        ),
    )
    assert [a.id for a in final.attempts] == [attempt_id]
    assert jobs_named(slurm, attempt_id) == [job]


def test_add_slurm_says_when_this_is_no_submit_host_or_the_partition_is_unknown(
    lab: Lab, slurm: SlurmCluster, tmp_path: Path
) -> None:
    bare = ControllerProcess(tmp_path / "bare", env={"PATH": str(tmp_path / "nothing")}).start()
    try:
        refused = bare.cli("hosts", "add-slurm", "cluster", "--partition", "gpu")
        assert refused.returncode != 0
        assert "sbatch, squeue, scontrol, scancel not found" in refused.stderr
        assert "Slurm submit host" in refused.stderr
    finally:
        bare.terminate()
    controller = lab.start_controller(SLURM_CONF=str(slurm.conf))
    unknown = controller.cli("hosts", "add-slurm", "cluster", "--partition", "nope")
    assert unknown.returncode != 0 and "partition 'nope'" in unknown.stderr
    assert controller.cli_json("hosts", "ls") == []


def test_a_job_submitted_just_before_a_crash_is_adopted_by_name_not_submitted_again(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "controller.db")
    cli = SlurmCli(env=slurm.env())
    request = X.AddHostRequest(
        name="cluster",
        labels={"pool": "slurm"},
        slurm=X.SlurmPool(partition="gpu", gpus_per_node=4, max_jobs=4),
    )
    pool_host(store, cli, request, time.time())
    (expanded,) = expand_text(yaml.safe_dump(spec("adopt")))
    row = ExperimentRow("x-adopt", "g", expanded.name, ExperimentState.QUEUED, expanded.spec)
    row.selector_key, row.gpus_needed, row.submitted_at = selector_key(expanded.host), 1, 1.0
    store.insert_experiments([row])
    (attempt,) = Scheduler(store, pools=lambda: {"cluster": 4}).pass_once()
    assert attempt.state.value == "DISPATCHING"
    # the controller ran sbatch and died before committing the job id: the job is in Slurm
    slurm.run("scontrol", "update", "nodename=localhost", "state=drain", "reason=e2e-adopt")
    job = slurm.run(
        "sbatch", "--parsable", f"--job-name=tunelab-{attempt.id}", "--partition=gpu",
        f"--output={tmp_path}/hand.log", "--wrap", "sleep 60",
    ).strip()  # fmt: skip
    agents = GrpcAgentClient(None, 1.0, 1.0)
    driver = SlurmDriver(
        store, AttemptDriver(store, agents, None, DriverSettings()), cli, tmp_path / "jobs", "x:1"
    )
    driver.tick(FencingToken(epoch=0))  # a SQLite file's turn
    kept = store.slurm_job(attempt.id)
    assert kept is not None and kept.job_id == job
    assert "sbatch" not in cli.calls and jobs_named(slurm, attempt.id) == [job]
    assert store.get_attempt(attempt.id).state.value == "STARTING"  # type: ignore[union-attr]
    driver.tick(FencingToken(epoch=0))  # a SQLite file's turn
    assert "queued at Slurm" in store.get_attempt(attempt.id).message  # type: ignore[union-attr]

    slurm.run("scancel", job)
    wait_for(
        "Slurm to let the job go",
        lambda: not slurm.run("squeue", "-h", "-j", job, check=False).strip(),
    )
    driver.tick(FencingToken(epoch=0))  # a SQLite file's turn
    lost = store.get_attempt(attempt.id)
    assert lost is not None and lost.state.value == "LOST"
    assert f"Slurm job {job} ended CANCELLED" in lost.message
    assert "sbatch" not in cli.calls
    agents.close()
    store.close()


def test_kill9_while_the_job_runs_then_restart_takes_its_reports_and_result_once(
    lab: Lab, slurm: SlurmCluster
) -> None:
    controller = start(lab, slurm)
    running = spec("running")
    running["server"]["flags"]["--startup-seconds"] = 3
    (submitted,) = lab.submit(running)
    experiment_id = submitted["id"]

    def job_running() -> str:
        experiment = controller.experiment(experiment_id)
        if not experiment.attempts:
            return ""
        jobs = jobs_named(slurm, experiment.attempts[0].id)
        return jobs[0] if jobs and slurm.job_state(jobs[0]) == "RUNNING" else ""

    job = wait_for("the job to run", job_running)
    attempt_id = controller.experiment(experiment_id).attempts[0].id
    controller.kill9()  # the job's reports fail meanwhile; run-once keeps going and retries
    controller.start()
    final = wait_for(
        "the result",
        lambda: (
            (e := controller.experiment(experiment_id)).state == X.EXPERIMENT_STATE_SUCCEEDED and e
        ),
    )
    assert [a.id for a in final.attempts] == [attempt_id]
    assert jobs_named(slurm, attempt_id) == [job]


def test_a_search_runs_its_trials_as_slurm_jobs_and_names_the_best(
    lab: Lab, slurm: SlurmCluster
) -> None:
    controller = start(lab, slurm)
    base = spec("slurm-search")
    base["benchmark"].pop("concurrency")
    base["search"] = {
        "space": {"server.flags.--itl-ms": [8, 4]},
        "objective": {"maximize": "output_throughput"},
        "load": {"concurrency": [2]},
        "budget": {"trials": 2},
        "strategy": "grid",
        "parallel": 2,
    }
    path = lab.root / "slurm-search.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    done = controller.cli("submit", str(path), "--wait", "--json", timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["state"] == "DONE", doc
    proposed = [t for t in doc["trials"] if not t.get("race")]
    assert [t["state"] for t in proposed] == ["DONE", "DONE"]
    assert all(t["state"] == "DONE" for t in doc["trials"])  # the race's launches too
    # the faster decode step wins, and each trial (race launches too) ran as a Slurm job of its own
    assert doc["best"]["params"] == {"server.flags.--itl-ms": 4}, doc["best"]
    listed = controller.cli_json("ls", "--group", doc["group"])
    assert len(listed) == len(doc["trials"])
    for experiment in listed:
        (attempt,) = controller.experiment(experiment["id"]).attempts
        assert len(jobs_named(slurm, attempt.id)) == 1
