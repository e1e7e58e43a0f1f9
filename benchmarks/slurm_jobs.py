"""Slurm path figures, on the tests' real single-node Slurm (tests/support/slurm.py):

1. jobs submitted per second: N experiments submitted at once to a pool with the node drained
   (so every job stays pending), from the stored submission to the last "submitted to Slurm"
   event;
2. the time from a job's start (scontrol's StartTime, 1 s resolution) to its first ReportRun
   (the controller's "first report" event): run-once's own start-up cost.

Needs root and Debian's slurm-wlm + munge. On this project's 2-core dev machine, which is
shared, both figures include queueing for CPU: they are ceilings, not floors.

    python benchmarks/slurm_jobs.py [--jobs 16]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.conftest import sim_experiment
from tests.support.controller_proc import ControllerProcess
from tests.support.slurm import SlurmCluster


def events(db: Path, like: str) -> list[tuple[float, str, str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(
            "SELECT at, ref, message FROM events WHERE message LIKE ?", (like,)
        ).fetchall()


def wait(what: str, check: object, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tunelab-slurm-bench-"))
    cluster = SlurmCluster().start()
    controller = ControllerProcess(
        root / "controller",
        env={
            "SLURM_CONF": str(cluster.conf),
            "TUNELAB_CONTROLLER_SLURM_AGENT_COMMAND": f"{sys.executable} -m tunelab.agent",
        },
    ).start()
    try:
        added = controller.cli(
            "hosts", "add-slurm", "cluster", "--partition", "gpu", "--gpus-per-node", "4",
            "--label", "pool=slurm", "--max-jobs", str(args.jobs),
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        cluster.run("scontrol", "update", "nodename=localhost", "state=drain", "reason=bench")
        doc = sim_experiment(
            "bench",
            host={"labels": {"pool": "slurm"}, "gpus": 1},
            repeat=args.jobs,
            benchmark={"concurrency": [1], "requests": 2, "input_len": 16, "output_len": 4},
        )
        spec = root / "spec.yaml"
        spec.write_text(yaml.safe_dump([doc]))
        submitted_at = time.time()
        result = controller.cli("submit", str(spec), "--json")
        assert result.returncode == 0, result.stderr
        wait(
            "every job submitted",
            lambda: len(events(controller.db, "submitted to Slurm%")) >= args.jobs,
        )
        submits = sorted(at for at, _, _ in events(controller.db, "submitted to Slurm%"))
        with sqlite3.connect(f"file:{controller.db}?mode=ro", uri=True) as conn:
            (stored_at,) = conn.execute("SELECT MIN(submitted_at) FROM experiments").fetchone()
        cli_start = stored_at - submitted_at  # the CLI's own start-up, not the controller's
        span = submits[-1] - stored_at
        cluster.run("scontrol", "update", "nodename=localhost", "state=resume")
        wait(
            "every job's first report",
            lambda: len(events(controller.db, "first report%")) >= args.jobs,
        )
        starts = {}
        for line in cluster.run("scontrol", "show", "job", "-o").splitlines():
            words = dict(w.split("=", 1) for w in line.split() if "=" in w)
            name = words.get("JobName", "")
            if name.startswith("tunelab-") and words.get("StartTime", "Unknown") != "Unknown":
                starts[name.removeprefix("tunelab-")] = datetime.fromisoformat(
                    words["StartTime"]
                ).timestamp()
        delays = [
            at - starts[ref]
            for at, ref, _ in events(controller.db, "first report%")
            if ref in starts
        ]
        print(f"{'figure':48} value")
        print(f"{'jobs submitted (through the controller)':48} {args.jobs}")
        print(f"{'CLI start to stored submission, s':48} {cli_start:.2f}")
        print(f"{'stored submission to last sbatch, s':48} {span:.2f}")
        print(f"{'jobs submitted per second':48} {args.jobs / span:.1f}")
        print(f"{'job start to first report, median s (±1 s)':48} {statistics.median(delays):.2f}")
        print(f"{'job start to first report, max s (±1 s)':48} {max(delays):.2f}")
    finally:
        controller.terminate()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
