"""A real single-node Slurm for the tests (Debian's ``slurm-wlm`` and ``munge``).

Everything lives in one temporary folder: a munge key and socket of its own, a ``slurm.conf``
on loopback ports below the ephemeral range, state, spool and logs. munged, slurmctld and slurmd
run as child processes in the foreground (``-F`` / ``-D``); clients find this cluster through
``SLURM_CONF`` (in :meth:`SlurmCluster.env`). No cgroups are needed: process tracking is
``linuxproc``, tasks are not confined, and the node declares four GRES GPUs by count only (no
device files), which is enough for Slurm to schedule ``--gres=gpu:N``. No accounting database:
finished jobs stay visible to ``scontrol show job`` for ``MinJobAge`` seconds, and each end is
written to a job-completion file.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.ports import free_port

GPUS = 4
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo")


def slurm_missing() -> str:
    """Why a real Slurm cannot run here, with the fix ('' when it can). The tests fail on it."""
    for binary in ("munged", "slurmctld", "slurmd", *CLIENTS):
        if shutil.which(binary) is None and not Path(f"/usr/sbin/{binary}").exists():
            return f"{binary} not installed: run `make deps` (Debian's slurm-wlm and munge)"
    if os.geteuid() != 0:
        return "the test cluster's slurmd must run as root: run the Slurm tests as root"
    return ""


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tunelab-slurm-"))
        self.root.chmod(0o755)
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge.socket"
        self.jobcomp = self.root / "jobcomp.log"
        self._procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        cpus = os.cpu_count() or 1
        memory_mb = max(256, (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2**21)
        for folder in ("state", "spool", "log"):
            (self.root / folder).mkdir()
        r = self.root
        self.conf.write_text(
            f"""ClusterName=tunelabtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
MinJobAge=3600
KillWait=2
InactiveLimit=0
SlurmdTimeout=60
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} Gres=gpu:{GPUS} \
State=UNKNOWN
PartitionName=gpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        )
        # Slurm drops a GPU without a device file; plain files stand in (nothing opens them).
        for index in range(GPUS):
            (self.root / f"fakegpu{index}").touch()
        (self.root / "gres.conf").write_text(
            f"NodeName=localhost Name=gpu File={self.root}/fakegpu[0-{GPUS - 1}]\n"
        )

    def _spawn(self, argv: list[str], log: str) -> None:
        out = (self.root / "log" / log).open("ab")
        self._procs.append(
            subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
                close_fds=True,
            )
        )
        out.close()

    def start(self) -> SlurmCluster:
        self._write_config()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(
            [_sbin("munged"), "-F", "--force", f"--key-file={key}", f"--socket={self.munge_socket}",
             f"--pid-file={self.root}/munged.pid", f"--log-file={self.root}/log/munged.log",
             f"--seed-file={self.root}/munge.seed"],
            "munged.out",
        )  # fmt: skip
        self._wait(lambda: self.munge_socket.exists(), "munged", 20)
        self._spawn([_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        self._spawn([_sbin("slurmd"), "-D", "-N", "localhost", "-f", str(self.conf)], "slurmd.out")
        self._wait(self._node_idle, "the node to be idle", 60)
        return self

    def _node_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return out.strip() == "idle"

    def _wait(self, ready: object, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(ready) and ready():
                return
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted((self.root / "log").iterdir())
        )
        self.stop()
        raise RuntimeError(f"the test Slurm did not come up (waiting for {what}):\n{logs}")

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def job_state(self, job_id: str) -> str:
        out = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        for word in out.split():
            if word.startswith("JobState="):
                return word.removeprefix("JobState=")
        return ""

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._procs.clear()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
