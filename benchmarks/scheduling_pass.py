"""One scheduling pass over a full queue, repeated on fresh copies of one SQLite database.

10,000 queued experiments (one host selector, as ``controller_scale.py`` submits them) and 200
free hosts; each pass places 200 and finds the rest waiting, so it also writes why the queue
waits, which changed from "no matching host can take runs now: h000 DRAINING, …" (the hosts
were drained while the queue filled). Prints the median and p90 of ``--passes`` passes, each on
its own copy, so every pass does the same work.

    .venv/bin/python benchmarks/scheduling_pass.py [--experiments 10000] [--hosts 200] [--passes 15]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.controller_scale import copy_db, percentile, spec_text
from tunelab.controller.hoststate import change_host, drain
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.spec.expand import expand_text
from tunelab.controller.states import ExperimentState, HostState
from tunelab.controller.store import SqliteStore
from tunelab.controller.store.models import ExperimentRow, HostRow, selector_key
from tunelab.controller.submission import unique_ids

BATCH = 100


def build(path: Path, experiments: int, hosts: int) -> None:
    """The database the controller would hold after the submissions of controller_scale.py."""
    store = SqliteStore(path)
    for i in range(hosts):
        name = f"h{i:03d}"
        store.add_host(
            HostRow(name=name, address=f"127.0.0.1:{10_000 + i}", labels={"pool": "scale"})
        )
        change_host(store, name, drain(True, clear_quarantine=False))
    for b, first in enumerate(range(0, experiments, BATCH)):
        expanded = expand_text(spec_text(f"b{b}", min(BATCH, experiments - first)))
        ids = unique_ids("x-", len(expanded))
        store.insert_experiments(
            [
                ExperimentRow(
                    id=ids[i], group=f"g-{b}", name=e.name, state=ExperimentState.QUEUED,
                    spec=e.spec, priority=e.priority, varied=e.varied,
                    selector_key=selector_key(e.host), gpus_needed=int(e.host.get("gpus") or 0),
                    repeat_index=e.repeat_index, max_attempts=e.max_attempts,
                    submitted_at=time.time(),
                )
                for i, e in enumerate(expanded)
            ]
        )  # fmt: skip
        if b == 0:
            Scheduler(store).pass_once()  # the queue waits on drained hosts, and says so
    for host in store.list_hosts():
        store.transition_host(host.name, host, HostState.READY, drain=False)
    store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--passes", type=int, default=15)
    args = parser.parse_args(argv)
    if min(args.experiments, args.hosts, args.passes) < 1:
        parser.error("--experiments, --hosts and --passes must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="tunelab-pass-"))
    try:
        base = root / "base.db"
        build(base, args.experiments, args.hosts)
        times: list[float] = []
        placed = 0
        for k in range(args.passes):
            copy = root / f"pass{k}.db"
            copy_db(base, copy)
            store = SqliteStore(copy)
            started = time.perf_counter()
            placed = len(Scheduler(store).pass_once())
            times.append((time.perf_counter() - started) * 1000)
            store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"scheduling pass: {args.experiments} queued, {args.hosts} free hosts, "
        f"{placed} placed per pass, {args.passes} passes on fresh copies"
    )
    print(f"{'figure':<40}{'value':>12}{'goal':>10}")
    print(f"{'pass median':<40}{statistics.median(times):>9.1f} ms{'< 50 ms':>10}")
    print(f"{'pass p90':<40}{percentile(times, 0.9):>9.1f} ms")
    print(f"{'pass min / max':<40}{min(times):>5.1f} / {max(times):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
