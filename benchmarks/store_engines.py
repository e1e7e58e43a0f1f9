"""The controller's store on SQLite beside PostgreSQL, in one run, on the same rows.

For each engine: submissions per second (10,000 experiments in SubmitExperiments-sized batches
of 100), one scheduling pass over 10,000 queued with 500 free hosts (and again with every host
busy), the per-attempt write a dispatch makes (p50/p99 of ``update_attempt`` with one writer,
and with two writers as two controllers would be), and a name lookup. PostgreSQL also with two
controllers' stores scheduling at once (one takes the turn, the other skips; no host gets two).
A real PostgreSQL is started in a temporary directory (tests/support/postgres.py), fsync off as
in the tests: the figures compare the engines' statement costs, not their durability.

Usage: python benchmarks/store_engines.py [--experiments 10000] [--hosts 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.postgres import PostgresServer
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.spec import expand_text
from tunelab.controller.states import ExperimentState, HostState
from tunelab.controller.store import ExperimentRow, HostRow, SqliteStore, Store
from tunelab.controller.store.models import selector_key
from tunelab.controller.store.postgres import PostgresStore

SPEC = """
name: bench
host: {labels: {pool: scale}}
server: {command: [engine], flags: {--port: "{port}"}, ready: {model: m}}
benchmark: {concurrency: [1], requests: 1}
"""


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1000:.{digits}f} ms"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def spread(values: list[float]) -> str:
    return f"{ms(pct(values, 0.5), 2)} / {ms(pct(values, 0.99), 2)}"


def fill(store: Store, experiments: int, hosts: int) -> float:
    """Queue ``experiments`` in batches of 100 and register ``hosts`` READY; submissions/s."""
    (template,) = expand_text(SPEC)
    key = selector_key(template.host)
    started = time.perf_counter()
    for b in range(experiments // 100):
        rows = []
        for i in range(100):
            row = ExperimentRow(
                f"x-{b:08x}{i:08x}", f"g-{b}", f"bench-{b}-{i}", ExperimentState.QUEUED,
                template.spec,
            )  # fmt: skip
            row.selector_key, row.submitted_at = key, time.time()
            rows.append(row)
        store.insert_experiments(rows)
    rate = experiments / (time.perf_counter() - started)
    for h in range(hosts):
        added = store.add_host(
            HostRow(name=f"h{h:03d}", address=f"h{h}:1", labels={"pool": "scale"})
        )
        store.transition_host(added.name, added, HostState.READY, gpu_count=8)
    return rate


def writes(store: Store, ids: list[str], threads: int) -> list[float]:
    """Seconds of each ``update_attempt`` (the acked write of a dispatch), ``threads`` at once."""
    out: list[float] = []
    lock = threading.Lock()

    def run(part: list[str]) -> None:
        for attempt_id in part:
            t0 = time.perf_counter()
            store.update_attempt(attempt_id, acked_at=time.time())
            with lock:
                out.append(time.perf_counter() - t0)

    workers = [threading.Thread(target=run, args=(ids[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out


def measure(name: str, open_store: Callable[[], Store], args: argparse.Namespace) -> dict[str, str]:
    store = open_store()
    rate = fill(store, args.experiments, args.hosts)
    t0 = time.perf_counter()
    placed = Scheduler(store).pass_once()
    full = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = Scheduler(store).pass_once()
    busy = time.perf_counter() - t0
    ids = [a.id for a in placed]
    one = writes(store, ids, 1)
    two = writes(store, ids, 2) if name == "sqlite" else writes_two(open_store, ids)
    t0 = time.perf_counter()
    for i in range(100):
        store.find_experiment_by_name(f"bench-{i}-{i % 100}")
    lookup = (time.perf_counter() - t0) / 100
    store.close()
    return {
        "submissions per second (batches of 100)": f"{rate:,.0f}/s",
        f"scheduling pass, {args.experiments} queued ({len(placed)} placed)": ms(full),
        f"scheduling pass, all hosts busy ({len(again)} placed)": ms(busy),
        "dispatch write p50 / p99, one controller": spread(one),
        "dispatch write p50 / p99, two controllers": spread(two),
        "name lookup": f"{lookup * 1000:.2f} ms",
    }


def writes_two(open_store: Callable[[], Store], ids: list[str]) -> list[float]:
    """Two stores (two controllers' pools) on one database, writing at once."""
    first, second = open_store(), open_store()
    out: list[float] = []
    threads = [
        threading.Thread(target=lambda s=s, p=p: out.extend(writes(s, p, 1)))
        for s, p in ((first, ids[0::2]), (second, ids[1::2]))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first.close()
    second.close()
    return out


def two_controllers_pass(url: str, args: argparse.Namespace) -> tuple[float, int, int]:
    """Both stores run a pass at the same moment: (seconds until both return, placed, max runs
    on one host)."""
    first, second = PostgresStore(url), PostgresStore(url)
    results: list[int] = []
    barrier = threading.Barrier(2)

    def run(store: PostgresStore) -> None:
        barrier.wait()
        results.append(len(Scheduler(store).pass_once()))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(s,)) for s in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    per_host = Counter(a.host for a in first.live_attempts())
    first.close()
    second.close()
    return seconds, sum(results), max(per_host.values(), default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=500)
    args = parser.parse_args(argv)
    server = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "controller.db"
            sqlite = measure("sqlite", lambda: SqliteStore(path), args)
        url = server.new_database()
        postgres = measure("postgresql", lambda: PostgresStore(url), args)
        url2 = server.new_database()
        seed = PostgresStore(url2)
        fill(seed, args.experiments, args.hosts)
        seed.close()
        seconds, placed, most = two_controllers_pass(url2, args)
    finally:
        server.stop()
    print(f"store engines: {args.experiments} experiments, {args.hosts} hosts (in process)")
    print(f"{'figure':<55} {'SQLite':>18} {'PostgreSQL':>18}")
    for key in sqlite:
        print(f"{key:<55} {sqlite[key]:>18} {postgres[key]:>18}")
    label = "two controllers' passes at once (placed; max per host)"
    print(f"{label:<55} {'-':>18} {f'{ms(seconds)} ({placed}; {most})':>18}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
