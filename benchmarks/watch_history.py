"""A watch's cost as its history grows (issue 45 item 5): the control tick, judging one
occurrence, ``watch show`` and ``report WATCH`` at 1k, 10k and 30k occurrences.

A SQLite store gets a watch whose history is seeded with N judged occurrences (verdict
documents as the judge writes them, about 1.5 KB each with a provenance) and one occurrence
pending, its launches queued. Then, with the product's own code:

* tick CPU: ``WatchDriver.tick`` while the occurrence runs (CPU ms a tick, mean of 200);
* judge CPU: the tick that judges it once its launches ended (bounded window, change points,
  state; mean of 5 occurrences);
* show / report: the real CLI (``tunelab watch show NAME --json`` and ``tunelab report NAME``)
  against a real controller service on loopback: wall seconds and the CLI's peak RSS.

  python benchmarks/watch_history.py [--sizes 1000,10000,30000]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.served_controller import serve_controller
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import HostRow, SqliteStore
from tunelab.controller.store.watch_models import WATCH_ACTIVE, WatchRow
from tunelab.controller.watches.driver import WatchDriver
from tunelab.controller.watches.spec import watch_from_text

SPEC = """\
name: nightly
server:
  engine: sglang
  command: [sim]
  flags: {--port: "{port}"}
  port: auto
  ready: {model: m}
benchmark: {requests: 10, input_len: 8, output_len: 8, concurrency: [8]}
watch: {every: 5s, launches: 3, metrics: [output_throughput, p99_ttft_ms], margin: 3%}
"""
PROVENANCE = {
    "engine": {"name": "sglang", "version": "0.5.2"},
    "argv": ["python", "-m", "sglang.launch_server", "--port", "PORT"] + ["--flag"] * 40,
    "env": {f"VAR_{i}": "x" * 20 for i in range(20)},
    "recorded_at": 1.0,
}


class Clock:
    def __init__(self) -> None:
        self.now = 1.0e9

    def __call__(self) -> float:
        return self.now


def verdict(number: int, rng: random.Random) -> dict[str, object]:
    values = {
        "output_throughput": [1000.0 * (1 + rng.gauss(0, 0.02)) for _ in range(3)],
        "p99_ttft_ms": [100.0 * (1 + rng.gauss(0, 0.02)) for _ in range(3)],
    }
    state = {"state": "no change", "since": 2, "cause": "verdict", "step_at": 0, "seen_point": 0}
    return {
        "verdict": "baseline" if number == 1 else "no change",
        "baseline": None if number == 1 else 1,
        "baseline_pool": [] if number == 1 else [1],
        "pool": [1],
        "values": values,
        "means": {m: sum(v) / 3 for m, v in values.items()},
        "provenance": PROVENANCE,
        "launches": 3,
        "launches_total": 3,
        "method": "benjamini-hochberg",
        "confidence": 0.975,
        "metrics": [
            {
                "metric": m,
                "change_pct": 0.5,
                "interval": [-2.0, 3.0],
                "p_adjusted": 0.6,
                "launches": [3, 3],
                "verdict": "no change",
                "detectable_pct": 2.5,
                "missing": "",
            }
            for m in values
        ],
        "changes": [],
        "reason": "",
        "state": dict.fromkeys(values, state),
        "change_points": [],
    }


def seed(path: Path, n: int, clock: Clock) -> SqliteStore:
    store = SqliteStore(path)
    store.add_host(HostRow(name="h1", address="h1:1"))
    found = watch_from_text(SPEC)
    assert found is not None
    store.insert_watch(WatchRow("nightly", found.spec.to_dict(), found.base_yaml, WATCH_ACTIVE,
                                clock.now, clock.now))  # fmt: skip
    rng = random.Random(n)
    rows = [
        ("nightly", k, f"g-{k}", clock.now - 5.0 * (n - k), clock.now - 5.0 * (n - k),
         json.dumps(verdict(k, rng), sort_keys=True), clock.now - 5.0 * (n - k) + 1)
        for k in range(1, n + 1)
    ]  # fmt: skip
    with store._tx() as conn:  # seeding only: the product writes them one by one
        conn.executemany(
            "INSERT INTO watch_occurrences (watch, number, grp, due_at, started_at, verdict_json,"
            " judged_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    return store


def tick(store: SqliteStore, driver: WatchDriver) -> None:
    with store.scheduling_pass() as turn:
        assert turn is not None
        driver.tick(turn)


def finish(store: SqliteStore) -> None:
    for exp in store.list_experiments([ExperimentState.QUEUED], limit=100):
        attempt = store.create_attempt(exp.id, "h1", [0], 1.0)
        point = {"concurrency": 8, "output_throughput": 1000.0 + exp.repeat_index,
                 "p99_ttft_ms": 100.0 + exp.repeat_index}  # fmt: skip
        store.finish_attempt(attempt.id, AttemptState.SUCCEEDED, [AttemptState.DISPATCHING],
                             result={"points": [point]}, provenance=PROVENANCE)  # fmt: skip


def cpu_ms(store: SqliteStore, driver: WatchDriver, times: int) -> float:
    start = time.process_time()
    for _ in range(times):
        tick(store, driver)
    return 1000.0 * (time.process_time() - start) / times


# the CLI's own peak (VmHWM of its image: ru_maxrss would count the forked benchmark's pages)
RUN = """import sys
from tunelab.cli.main import main
code = main(sys.argv[1:])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
sys.stderr.write(f"HWM {hwm}\\n")
sys.exit(code)
"""


def cli(port: int, *argv: str) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, output bytes) of one CLI run."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv, "--controller", f"127.0.0.1:{port}"],
        capture_output=True,
        check=True,
    )
    hwm = next(line for line in done.stderr.decode().splitlines() if line.startswith("HWM "))
    return time.monotonic() - started, int(hwm.split()[1]) / 1024.0, len(done.stdout)


def measure(n: int, folder: Path) -> dict[str, float]:
    clock = Clock()
    store = seed(folder / f"w{n}.db", n, clock)
    driver = WatchDriver(store, clock)
    tick(store, driver)  # queues occurrence n + 1
    running = cpu_ms(store, driver, 200)
    judging = []
    for _ in range(5):
        finish(store)
        judging.append(cpu_ms(store, driver, 1))
        clock.now += 5.0
        tick(store, driver)  # the next one queued
    try:
        with serve_controller(store) as daemon:
            show = cli(daemon.port, "watch", "show", "nightly", "--json")
            report = cli(daemon.port, "report", "nightly", "--out", str(folder / f"r{n}.html"))
    finally:
        store.close()
    return {
        "tick": running,
        "judge": sum(judging) / len(judging),
        "show_s": show[0],
        "show_mb": show[1],
        "show_kb": show[2] / 1024.0,
        "report_s": report[0],
        "report_mb": report[1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,30000")
    args = parser.parse_args()
    head = ("occurrences", "tick CPU ms", "judge CPU ms", "show s", "show RSS MiB", "show KiB",
            "report s", "report RSS MiB")  # fmt: skip
    print(" ".join(f"{h:>{max(len(h), 7)}}" for h in head))
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            r = measure(n, Path(tmp))
            print(f"{n:>11,} {r['tick']:>11.2f} {r['judge']:>12.1f} {r['show_s']:>7.2f} "
                  f"{r['show_mb']:>12.0f} {r['show_kb']:>9.0f} {r['report_s']:>9.2f} "
                  f"{r['report_mb']:>14.0f}")  # fmt: skip
    print(
        f"controller peak RSS (this process, all sizes): "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
