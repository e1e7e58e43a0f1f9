"""The monitor's stop ladder against a walk that once missed a process in transit.

The monitor runs in a child process of its own (it is a subreaper and reaps every child, which
this test process must not do), over a real leader and a real worker that ignores SIGTERM. Its
tree walk is made to come back empty once, right after the leader was reaped: the read a
racing kernel once gave it. The worker must still have its whole grace before SIGKILL.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DRIVER = r"""
import json, os, socket, sys, time
from pathlib import Path
from tunelab.agent.procs import monitor as m

folder = Path(sys.argv[1])
grace = float(sys.argv[2])
os.chdir(folder)
m.set_subreaper()
leader = (
    "import os,signal,subprocess,sys,time;"
    "w=subprocess.Popen([sys.executable,'-c',"
    "'import os,signal,time;signal.signal(signal.SIGTERM,signal.SIG_IGN);"
    "print(\"worker\",os.getpid(),flush=True);time.sleep(600)']);"
    "time.sleep(600)"
)
reaped = {}


class MissesOnce(m.Monitor):
    missed = False

    def scan(self):
        tree = super().scan()
        if self.server_gone() and not self.missed:
            MissesOnce.missed = True
            self.tree = {}
            return {}
        return tree

    def reap(self):
        before = set(os.listdir("/proc"))
        super().reap()
        for pid in before - set(os.listdir("/proc")):
            reaped.setdefault(pid, time.monotonic())


listener = socket.socket(socket.AF_UNIX)
listener.bind(str(folder / "m.sock"))
listener.listen()
mon = MissesOnce("ladder", listener, {
    "argv": [sys.executable, "-c", leader], "cwd": str(folder), "log": str(folder / "log"),
    "spec": {},
})
mon.spawn()
worker = 0
while not worker:
    text = (folder / "log").read_text()
    worker = int(text.split()[1]) if text.startswith("worker") else 0
    time.sleep(0.01)
stop_at = time.monotonic()
mon.request_stop(grace, 5.0, "test")
while not mon.finished():
    mon.reap()
    mon.advance_stop()
    time.sleep(0.02)
print(json.dumps({
    "missed": MissesOnce.missed,
    "worker_after": reaped.get(str(worker), time.monotonic()) - stop_at,
    "escalated": mon.ladder.escalated,
}))
"""


GRACE = 1.0


def test_a_walk_that_misses_the_worker_once_does_not_cut_its_grace(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path), str(GRACE)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout.splitlines()[-1])

    assert result["missed"]  # the fault was injected: a walk came back empty mid-stop
    assert result["worker_after"] >= GRACE - 0.05  # SIGKILL only once the grace was over
    assert result["escalated"]
