"""Hostile specs and name lookups against the real controller process.

1. Each spec of tests/support/hostile_specs.py submitted N times (and N times as --dry-run) to a
   running controller: refusal time (median, max) and the controller's RSS before and its peak
   (VmHWM) after. Goal: peak RSS < 200 MB. (Before the limits: ``repeat: 1000000000`` took the
   controller to 4 GB in 30 s, the alias bomb to 9.4 GB.)
2. Lookup of an experiment by name with 10,000 stored: the release before's way (read every row,
   decode, filter; what GetExperiment did) beside the indexed ``find_experiment_by_name``, in
   the same run on the same database file, and GetExperiment by name through gRPC.

Usage: python benchmarks/hostile_specs.py [--repeat 5] [--experiments 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.controller_proc import ControllerProcess
from tests.support.hostile_specs import BASE, HOSTILE
from tunelab.controller.spec import expand_text
from tunelab.controller.states import ExperimentState
from tunelab.controller.store import ExperimentRow, SqliteStore
from tunelab.controller.store.models import selector_key
from tunelab.v1 import controller_pb2


def status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} for {pid}")


def hostile(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        controller = ControllerProcess(Path(tmp)).start()
        assert controller.proc is not None
        pid = controller.proc.pid
        stub = controller.stub()
        try:
            print(f"controller RSS at start: {status_mb(pid, 'VmRSS'):.1f} MB\n")
            print(f"{'spec':<18} {'bytes':>9} {'median ms':>10} {'max ms':>8} {'peak RSS MB':>12}")
            for name, (text, words) in HOSTILE.items():
                times = []
                for i in range(repeat * 2):
                    request = controller_pb2.SubmitExperimentsRequest(
                        spec_yaml=text, source="hostile.yaml", dry_run=i % 2 == 1
                    )
                    started = time.perf_counter()
                    try:
                        stub.SubmitExperiments(request, timeout=60)
                        raise SystemExit(f"{name} was accepted")
                    except grpc.RpcError as exc:
                        assert words in (exc.details() or ""), exc.details()
                    times.append((time.perf_counter() - started) * 1000)
                print(
                    f"{name:<18} {len(text.encode()):>9} {statistics.median(times):>10.1f} "
                    f"{max(times):>8.1f} {status_mb(pid, 'VmHWM'):>12.1f}"
                )
            listed = stub.ListExperiments(controller_pb2.ListExperimentsRequest(), timeout=10)
            print(f"\nqueued after all of them: {len(listed.experiments)}")
        finally:
            controller.terminate()


def lookups(count: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        controller = ControllerProcess(Path(tmp)).start()
        try:
            controller.terminate()  # the file is made; fill it directly, then serve it
            store = SqliteStore(controller.db)
            (template,) = expand_text(BASE)
            rows = []
            for i in range(count):
                row = ExperimentRow(
                    f"x-{i:016x}", "g-1", f"exp-{i}", ExperimentState.QUEUED, template.spec
                )
                row.selector_key, row.submitted_at = selector_key(template.host), float(i)
                rows.append(row)
            store.insert_experiments(rows)
            target = f"exp-{count // 2}"

            def old_way() -> object:
                found = [e for e in store.list_experiments(limit=100_000) if e.name == target]
                return found[-1]

            def indexed() -> object:
                return store.find_experiment_by_name(target)

            results = {}
            methods = (("read every row (before)", old_way), ("name index (after)", indexed))
            for label, fn in methods:
                times = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    assert fn() is not None
                    times.append((time.perf_counter() - started) * 1000)
                results[label] = statistics.median(times)
            store.close()
            controller.start()
            stub = controller.stub()
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                stub.GetExperiment(controller_pb2.GetExperimentRequest(id=target), timeout=10)
                times.append((time.perf_counter() - started) * 1000)
            results["GetExperiment by name, gRPC (after)"] = statistics.median(times)
            print(f"\nname lookup with {count} experiments stored (median of {repeat})")
            print(f"{'method':<40} {'ms':>10}")
            for label, ms in results.items():
                print(f"{label:<40} {ms:>10.3f}")
        finally:
            controller.terminate()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--experiments", type=int, default=10_000)
    args = parser.parse_args(argv)
    hostile(args.repeat)
    lookups(args.experiments, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
