"""Issue 45.3: a ``<db>.slurm`` folder made by another user stopped a controller that has no
Slurm pool at all (it never uses the folder). The real ``tunelab controller serve`` as root, in a
PID and mount namespace: without a pool it serves (one warning) and refuses to add a pool,
naming the folder and the fix; with a pool in its database it refuses to start, as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.controller_proc import ControllerProcess
from tests.support.daemon_proc import REPO
from tests.support.ports import free_port
from tunelab.controller.states import HostState
from tunelab.controller.store import HostRow, SqliteStore

NOBODY = 65534
pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]


def plant(db: Path) -> Path:
    folder = Path(f"{db}.slurm")
    folder.mkdir(mode=0o755, parents=True)
    os.chown(folder, NOBODY, NOBODY)
    return folder


def test_someone_elses_jobs_folder_does_not_stop_a_controller_without_a_pool(
    tmp_path: Path,
) -> None:
    controller = ControllerProcess(tmp_path / "c")
    folder = plant(controller.db)
    controller.start()
    try:
        listed = controller.cli("hosts", "ls", "--json")
        assert listed.returncode == 0, listed.stderr + controller.log()[-2000:]
        assert "slurm_jobs_folder_untrusted" in controller.log()
        added = controller.cli("hosts", "add-slurm", "cluster", "--partition", "gpu")
        assert added.returncode != 0
        assert f"Slurm jobs folder {folder} is owned by uid {NOBODY}" in added.stderr
        assert "chmod 0700" in added.stderr and "Traceback" not in added.stderr
    finally:
        controller.terminate()


def test_with_a_pool_the_planted_folder_still_refuses_the_start(tmp_path: Path) -> None:
    db = tmp_path / "controller.db"
    store = SqliteStore(db)
    store.add_host(HostRow(name="cluster", address="slurm://gpu", state=HostState.READY))
    store.set_slurm_pool("cluster", {"partition": "gpu", "max_jobs": 4})
    store.close()
    folder = plant(db)
    command = [sys.executable, "-m", "tunelab.cli", "controller", "serve",
               "--listen", f"127.0.0.1:{free_port()}", "--db", str(db)]  # fmt: skip
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert str(folder) in result.stderr and f"owned by uid {NOBODY}" in result.stderr
