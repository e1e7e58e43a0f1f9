"""E2E: a Slurm jobs folder is trusted only when it is ours (issue 36.1).

The real ``tunelab controller serve`` as root with a real single-node Slurm, each test in a PID and
mount namespace of its own. ``nobody`` plants the jobs folder (or its key) the controller would
sign every report token with; the old controller took the key whatever its owner, and a
``ReportRun`` forged with it made an experiment SUCCEEDED."""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import Lab
from tests.e2e.test_slurm import spec, start
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port
from tests.support.slurm import SlurmCluster, slurm_missing
from tunelab.controller.states import HostState
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.v1 import controller_pb2

X = controller_pb2
NOBODY = 65534
PLANTED_KEY = b"K" * 32
pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    missing = slurm_missing()
    if missing:  # never a skip: `make deps` installs what these tests need
        pytest.fail(f"no real Slurm here: {missing}")
    cluster = SlurmCluster().start()
    try:
        yield cluster
    finally:
        cluster.close()


def serve_once(db: Path, slurm: SlurmCluster) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tunelab.cli", "controller", "serve",
               "--listen", f"127.0.0.1:{free_port()}", "--db", str(db)]  # fmt: skip
    env = {**slurm.env(), "TUNELAB_CONTROLLER_TICK": "0.2s"}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


def refused_naming(result: subprocess.CompletedProcess[str], path: Path, what: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(path) in lines[0] and what in lines[0], lines[0]
    assert "chmod 0700" in lines[0], lines[0]


def forged(attempt_id: str) -> X.ReportRunRequest:
    token = hmac.new(PLANTED_KEY, attempt_id.encode(), hashlib.sha256).hexdigest()
    return X.ReportRunRequest(attempt_id=attempt_id, token=token, slurm_job_id="1")


def test_a_jobs_folder_planted_by_nobody_refuses_the_start_in_one_line(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    db = tmp_path / "controller.db"
    store = SqliteStore(db)  # a controller with a pool (without one it serves: issue 45.3)
    store.add_host(HostRow(name="cluster", address="slurm://gpu", state=HostState.READY))
    store.set_slurm_pool("cluster", {"partition": "gpu", "max_jobs": 4})
    store.close()
    folder = Path(f"{db}.slurm")
    folder.mkdir(mode=0o755)
    (folder / "report.key").write_bytes(PLANTED_KEY)
    (folder / "report.key").chmod(0o644)
    os.chown(folder / "report.key", NOBODY, NOBODY)
    os.chown(folder, NOBODY, NOBODY)
    refused_naming(serve_once(db, slurm), folder, f"owned by uid {NOBODY}")

    os.chown(folder, 0, 0)  # the folder ours now, but group-writable
    folder.chmod(0o775)
    refused_naming(serve_once(db, slurm), folder, "writable by group or others (mode 0775)")

    folder.chmod(0o700)  # the folder is right; nobody's key in it is not
    result = serve_once(db, slurm)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{folder}/report.key is owned by uid {NOBODY}" in result.stderr, result.stderr

    os.chown(folder / "report.key", 0, 0)  # root's, but 0644
    assert "mode 0644" in serve_once(db, slurm).stderr

    (folder / "report.key").chmod(0o600)
    os.link(folder / "report.key", tmp_path / "second-name")  # a hard link kept elsewhere
    assert "has 2 links" in serve_once(db, slurm).stderr

    os.unlink(tmp_path / "second-name")
    (folder / "report.key").unlink()
    (folder / "report.key").symlink_to(tmp_path / "second-name")
    assert "without following links" in serve_once(db, slurm).stderr

    shutil.rmtree(folder)
    folder.symlink_to(tmp_path)  # the folder itself a link to a folder of ours
    refused_naming(serve_once(db, slurm), folder, "is a symlink")


def test_a_folder_given_away_runs_nothing_and_a_key_planted_between_runs_signs_nothing(
    tmp_path: Path, slurm: SlurmCluster
) -> None:
    lab = Lab(tmp_path)
    try:
        controller = start(lab, slurm)
        (done,) = lab.submit(spec("ours"), wait=True)
        assert done["state"] == "SUCCEEDED", done
        folder = Path(f"{controller.db}.slurm")
        key = folder / "report.key"
        attempt_dir = folder / done["attempts"][0]["id"]
        modes = [os.stat(p).st_mode & 0o777 for p in (folder, key, attempt_dir)]
        assert modes == [0o700, 0o600, 0o700], modes
        assert [os.stat(attempt_dir / n).st_mode & 0o777 for n in ("token", "job.sh")] == [
            0o600,
            0o700,
        ]
        # a report signed with a key nobody chose is not taken
        with pytest.raises(grpc.RpcError) as denied:
            controller.stub().ReportRun(forged(done["attempts"][0]["id"]), timeout=10)
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED

        # the folder handed to nobody while the controller runs: the next attempt writes
        # nothing there and submits nothing; its reason names the folder and the fix
        os.chown(folder, NOBODY, NOBODY)
        (failed,) = lab.submit(spec("given-away", max_attempts=1), wait=True)
        assert failed["state"] == "FAILED", failed
        (attempt,) = failed["attempts"]
        assert attempt["state"] == "FAILED_STARTUP", attempt
        assert f"Slurm jobs folder {folder} is owned by uid {NOBODY}" in attempt["message"]
        assert "chmod 0700" in attempt["message"], attempt["message"]
        assert not (folder / attempt["id"]).exists()
        assert f"tunelab-{attempt['id']}" not in slurm.run("squeue", "-h", "-o", "%j")
        controller.terminate()

        # the key swapped for nobody's between runs: the restart refuses, nothing is signed
        os.chown(folder, 0, 0)
        key.unlink()
        key.write_bytes(PLANTED_KEY)
        os.chown(key, NOBODY, NOBODY)
        result = serve_once(controller.db, slurm)
        assert result.returncode == 2, result.stderr
        assert f"{key} is owned by uid {NOBODY}" in result.stderr, result.stderr
    finally:
        lab.close()
