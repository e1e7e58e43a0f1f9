"""Integration: the real controller process against hostile specs and a failing database —
refused quickly with bounded memory and the queue untouched; a read-only database is one line
and exit 2; a deleted database stops writes; a full disk (a real 2 MiB tmpfs) refuses a
submission whole and the controller keeps serving."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
import pytest

from tests.support.controller_proc import ControllerProcess
from tests.support.daemon_proc import REPO
from tests.support.hostile_specs import BASE, HOSTILE
from tunelab.controller.store import SqliteStore
from tunelab.v1 import controller_pb2

X = controller_pb2
ROOT = os.geteuid() == 0
needs_mounts = pytest.mark.skipif(not ROOT, reason="mounts a tmpfs in a mount namespace (root)")


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the most resident memory the process ever had."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def submit(
    controller: ControllerProcess, text: str, dry_run: bool = False
) -> X.SubmitExperimentsResponse:
    request = X.SubmitExperimentsRequest(spec_yaml=text, source="hostile.yaml", dry_run=dry_run)
    return controller.stub().SubmitExperiments(request, timeout=30)


def listed(controller: ControllerProcess) -> int:
    reply = controller.stub().ListExperiments(X.ListExperimentsRequest(limit=100_000), timeout=10)
    return len(reply.experiments)


class MountedController(ControllerProcess):
    """A controller whose --db lies on a mount only its own mount namespace sees."""

    def __init__(self, workdir: Path, mount: str) -> None:
        super().__init__(workdir)
        self.mount = mount
        self.db = workdir / "mnt" / "controller.db"

    def command(self) -> list[str]:
        (self.workdir / "mnt").mkdir(parents=True, exist_ok=True)
        inner = shlex.join(super().command())
        script = f"{self.mount} && exec {inner}"
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def test_hostile_specs_are_refused_fast_with_bounded_memory_and_nothing_queued(
    tmp_path: Path,
) -> None:
    controller = ControllerProcess(tmp_path).start()
    try:
        assert controller.proc is not None
        for name, (text, words) in HOSTILE.items():
            for dry_run in (False, True):
                started = time.monotonic()
                with pytest.raises(grpc.RpcError) as info:
                    submit(controller, text, dry_run)
                seconds = time.monotonic() - started
                assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, name
                assert words in (info.value.details() or ""), name
                assert seconds < 5, (name, seconds)  # generous: a shared CI machine
        assert listed(controller) == 0  # the queue untouched
        assert peak_rss_mb(controller.proc.pid) < 500  # the precise figure: the benchmark
        assert len(submit(controller, BASE).experiments) == 1  # and it still takes good specs
        assert listed(controller) == 1
    finally:
        controller.terminate()


def test_submissions_get_64_bit_ids_without_collisions(tmp_path: Path) -> None:
    controller = ControllerProcess(tmp_path).start()
    try:
        text = BASE + "matrix: {benchmark.seed: [" + ",".join(map(str, range(1000))) + "]}\n"
        text += "repeat: 4\n"  # 4,000: this bare stub keeps gRPC's 4 MiB limit (the CLI: 64 MiB)
        ids = [e.id for e in submit(controller, text).experiments]
        assert len(ids) == len(set(ids)) == 4000 == listed(controller)
        assert all(len(i) == len("x-") + 16 for i in ids)
    finally:
        controller.terminate()


def test_a_read_only_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    SqliteStore(folder / "controller.db").close()
    serve = shlex.join(
        [sys.executable, "-m", "tunelab.cli", "controller", "serve", "--listen",
         "127.0.0.1:0", "--db", str(folder / "controller.db")]
    )  # fmt: skip
    if ROOT:  # root writes through file modes: make the file system read-only instead
        where = shlex.quote(str(folder))
        script = f"mount --bind -o ro {where} {where} && exec {serve}"
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    else:
        (folder / "controller.db").chmod(0o400)
        folder.chmod(0o500)
        command = shlex.split(serve)
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("tunelab controller: cannot write the database"), lines[0]
    assert "Read-only file system" in lines[0] or "Permission denied" in lines[0]


def test_a_deleted_database_stops_writes_and_says_so(tmp_path: Path) -> None:
    controller = ControllerProcess(tmp_path).start()
    try:
        assert len(submit(controller, BASE).experiments) == 1
        for suffix in ("", "-wal", "-shm"):
            Path(f"{controller.db}{suffix}").unlink(missing_ok=True)
        with pytest.raises(grpc.RpcError) as info:
            submit(controller, BASE.replace("name: hostile", "name: after"))
        assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "was deleted while the controller ran; writes are refused" in (
            info.value.details() or ""
        )
        assert listed(controller) == 1  # reads still answer
        assert not controller.db.exists()  # and nothing wrote a new, empty database
    finally:
        controller.terminate()
    assert '"event": "store_file_gone"' in controller.log()


@needs_mounts
def test_a_full_disk_refuses_a_submission_whole_and_the_controller_keeps_serving(
    tmp_path: Path,
) -> None:
    mnt = shlex.quote(str(tmp_path / "mnt"))
    controller = MountedController(tmp_path, f"mount -t tmpfs -o size=2m tmpfs {mnt}").start()
    pad = "x" * 3000  # rows of ~3.5 kB: 100 of them fill the 2 MiB disk in a few batches
    batch = BASE.replace("ready: {model: sim}", f"ready: {{model: sim}}\n  env: {{PAD: {pad}}}")
    batch += "repeat: 100\n"
    accepted = 0
    try:
        error = None
        for i in range(60):
            try:
                submit(controller, batch.replace("name: hostile", f"name: b{i}"))
                accepted += 100
            except grpc.RpcError as exc:
                error = exc
                break
        assert error is not None, "the 2 MiB tmpfs never filled"
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
        assert "is full; nothing of this request was stored" in (error.details() or "")
        assert accepted > 0 and listed(controller) == accepted  # nothing half-stored
        assert psutil.Process(controller.proc.pid).is_running()  # type: ignore[union-attr]
    finally:
        controller.terminate()
