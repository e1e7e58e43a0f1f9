"""Integration: the store contract on both stores — a SQLite file and a real PostgreSQL server
(tests/support/postgres.py) — and what only a shared database needs: two controllers' stores
scheduling on one database never place two runs on one host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import PostgresServer
from tests.unit.controller import test_store_scheduler as unit
from tests.unit.controller.test_store_scheduler import host, queue
from tunelab.analysis.noise import NoiseProfile, ProfileKey
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.states import AttemptState, SearchState, TrialState
from tunelab.controller.store import (
    HostRow,
    SqliteStore,
    Store,
    StoreConflict,
    StoreError,
    StoreFenced,
    factory,
)
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.factory import open_store
from tunelab.controller.store.postgres import SCHEDULE_LOCK, PostgresStore
from tunelab.controller.store.schema import load_migrations
from tunelab.controller.store.search_models import SearchRow, TrialRow
from tunelab.controller.store.slurmbook import SlurmJobRow
from tunelab.controller.store.transfer import TABLES, export_lines, import_lines

# The scheduler/store tests of tests/unit, collected here again with `store` over both engines
# (the reopen test opens a SQLite file by name: it stays in unit).
globals().update(
    (name, test)
    for name, test in vars(unit).items()
    if name.startswith("test_") and name != "test_the_database_survives_a_reopen"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SqlStore:
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "controller.db")
    server: PostgresServer = request.getfixturevalue("postgres")
    return PostgresStore(server.new_database(), tmp_path / "secrets.json")


def test_the_open_store_follows_the_db_setting(tmp_path: Path, postgres: PostgresServer) -> None:
    assert type(open_store(str(tmp_path / "c.db"))) is SqliteStore
    pg = open_store(postgres.new_database())
    assert isinstance(pg, PostgresStore)
    assert not (Path.cwd() / "postgresql:").exists()  # never taken for a folder name


def test_both_engines_reach_the_same_schema_version(store: SqlStore) -> None:
    assert store.schema_version == load_migrations()[-1].version


def test_host_tokens_stay_out_of_the_database(store: SqlStore) -> None:
    store.add_host(HostRow(name="h", address="h:1", token="pg-secret-token"))
    assert store.get_host("h").token == "pg-secret-token"  # type: ignore[union-attr]
    columns = {k for r in store._query("SELECT * FROM hosts") for k in r.keys()}  # noqa: SIM118
    assert "token" not in columns
    with pytest.raises(StoreConflict, match="exists"):
        store.add_host(HostRow(name="h", address="h:2"))
    store.add_host(HostRow(name="h", address="h:2"), replace=True)
    assert store.get_host("h").address == "h:2"  # type: ignore[union-attr]


def test_name_lookup_and_batched_reads(store: SqlStore) -> None:
    ids = queue(store, n=5)
    found = store.find_experiment_by_name("s#3")
    assert found is not None and found.id == ids[2]
    assert set(store.get_experiments(ids)) == set(ids)
    assert store.attempts_for_many(ids) == {i: [] for i in ids}
    assert store.now() > 1.7e9


def slurm_attempt(store: SqlStore) -> str:
    """A pool (a host row and its sbatch settings) with one attempt DISPATCHING on it."""
    (experiment,) = queue(store, n=1)
    store.add_host(HostRow(name="pool", address="slurm:gpu", labels={"pool": "a"}))
    store.set_slurm_pool("pool", {"partition": "old"})
    store.set_slurm_pool("pool", {"partition": "gpu", "max_jobs": 4})  # replaces, one row
    return store.create_attempt(experiment, "pool", [], store.now()).id


def test_a_trials_launch_evidence_is_columns_and_older_rows_are_carried_over(
    store: SqlStore,
) -> None:
    """Migration 9 (issue 43.2): the phase, race round, load, SLO ratios, host and GPU-seconds
    of a trial are written and read as columns on both engines; and its step copies them out
    of the details of a row written before it (here: one whose columns are reset)."""
    store.insert_search(SearchRow("g-e", "s", SearchState.RUNNING, {}, {}, 1.0))
    row = TrialRow("g-e", 1, {"a": 1}, TrialState.RUNNING, 1.0, phase="race", race_round=2)
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.add_trials([row], [], turn)
        row.state, row.objective = TrialState.DONE, 100.0
        row.load, row.slo_ratios, row.host, row.gpu_seconds = ("rate", 4.0), {"x": 0.9}, "h", 7.5
        store.finish_trial(row, turn)
    [back] = store.search_trials("g-e")
    assert (back.phase, back.race_round, back.load) == ("race", 2, ("rate", 4.0))
    assert (back.slo_ratios, back.host, back.gpu_seconds) == ({"x": 0.9}, "h", 7.5)
    # a row as written before migration 9: its evidence only in details, the columns default
    old = {"race": 3, "load": {"concurrency": 8}, "slo_margins": {"tpot_p99_ms": 0.25},
           "host": "h2", "gpu_seconds": 12.0}  # fmt: skip
    store.insert_search(SearchRow("g-o", "s", SearchState.RUNNING, {}, {}, 1.0))
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.add_trials(
            [TrialRow("g-o", 1, {"a": 1}, TrialState.DONE, 1.0, details=old)], [], turn
        )
    with store._tx() as conn:
        store._carry_launch_evidence(conn)
    [carried] = store.search_trials("g-o")
    assert (carried.phase, carried.race_round, carried.load) == ("race", 3, ("concurrency", 8.0))
    assert carried.slo_ratios == {"tpot_p99_ms": 0.75}
    assert (carried.host, carried.gpu_seconds) == ("h2", 12.0)


def test_slurm_pools_and_jobs_on_both_engines(store: SqlStore) -> None:
    attempt = slurm_attempt(store)
    assert store.slurm_pools() == {"pool": {"max_jobs": 4, "partition": "gpu"}}
    assert store.slurm_job(attempt) is None
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.record_slurm_job(attempt, "pool", "41", 1.8e9, "Slurm job 41 submitted", turn)
    row = store.get_attempt(attempt)
    assert row is not None and row.state is AttemptState.STARTING
    assert (row.dispatched_at, row.acked_at, row.message) == (
        1.8e9,
        1.8e9,
        "Slurm job 41 submitted",
    )
    moves = [(e["from_state"], e["to_state"]) for e in store.events_for(attempt)]
    assert ("DISPATCHING", "STARTING") in moves
    assert store.slurm_job(attempt) == SlurmJobRow(attempt, "pool", "41", 1.8e9)
    with pytest.raises(StoreConflict, match="no longer DISPATCHING"):  # never a second job
        store.record_slurm_job(attempt, "pool", "42", 1.8e9, "again", None)
    with pytest.raises(StoreConflict, match="no longer DISPATCHING"):
        store.record_slurm_job("no-such-attempt", "pool", "43", 1.8e9, "none", None)
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.set_slurm_job_state(attempt, "PENDING", "Resources", turn)
    assert store.slurm_job(attempt) == SlurmJobRow(
        attempt, "pool", "41", 1.8e9, "PENDING", "Resources"
    )
    assert [r["job_id"] for r in store._query("SELECT job_id FROM slurm_jobs")] == ["41"]


@pytest.mark.parametrize("target", ["sqlite", "postgresql"])
def test_an_export_and_import_keeps_slurm_pools_and_jobs(
    store: SqlStore, target: str, tmp_path: Path, postgres: PostgresServer
) -> None:
    attempt = slurm_attempt(store)
    with store.scheduling_pass() as turn:
        assert turn is not None
        store.record_slurm_job(attempt, "pool", "41", 1.8e9, "Slurm job 41 submitted", turn)
        store.set_slurm_job_state(attempt, "PENDING", "Priority", turn)
    assert {"slurm_pools", "slurm_jobs"} <= set(TABLES)
    copy = (
        SqliteStore(tmp_path / "copy.db")
        if target == "sqlite"
        else PostgresStore(postgres.new_database(), tmp_path / "copy-secrets.json")
    )
    counts = import_lines(copy, export_lines(store))
    assert (counts["slurm_pools"], counts["slurm_jobs"]) == (1, 1)
    assert copy.slurm_pools() == store.slurm_pools()
    assert copy.slurm_job(attempt) == store.slurm_job(attempt)
    assert copy.slurm_job(attempt) == SlurmJobRow(
        attempt, "pool", "41", 1.8e9, "PENDING", "Priority"
    )
    assert list(export_lines(copy)) == list(export_lines(store))


def test_a_newer_postgres_schema_is_refused(postgres: PostgresServer) -> None:
    url = postgres.new_database()
    PostgresStore(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        PostgresStore(url)


def test_an_unreachable_postgres_is_one_clear_error() -> None:
    with pytest.raises(StoreError, match="cannot reach the database postgresql://u:\\*\\*\\*@"):
        PostgresStore("postgresql://u:hunter2@127.0.0.1:1/x", timeout=2)


def test_two_controllers_on_one_database_never_double_book_a_host(
    postgres: PostgresServer,
) -> None:
    url = postgres.new_database()
    first, second = PostgresStore(url), PostgresStore(url)
    queue(first, n=60)
    for i in range(12):
        host(first, f"h{i}", 0)
    with first.scheduling_pass() as ours:
        assert ours
        assert Scheduler(second).pass_once() == []  # the other controller skips the pass
    created: list[str] = []
    lock = threading.Lock()

    def schedule(store: SqlStore) -> None:
        for _ in range(20):
            made = Scheduler(store).pass_once()
            with lock:
                created.extend(a.id for a in made)
            for attempt in made:  # finish some, so that passes keep placing
                store.finish_attempt(attempt.id, AttemptState.SUCCEEDED, [AttemptState.DISPATCHING])

    threads = [threading.Thread(target=schedule, args=(s,)) for s in (first, second) * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    live = Counter(a.host for a in first.live_attempts())
    assert all(n <= 1 for n in live.values()), live
    rows = first._query("SELECT experiment_id FROM attempts")
    per_experiment = Counter(r["experiment_id"] for r in rows)
    assert all(n == 1 for n in per_experiment.values()), per_experiment
    assert len(created) == len(set(created)) > 12


def test_a_controller_that_lost_its_turn_cannot_commit_a_pass(postgres: PostgresServer) -> None:
    """Fencing: A holds the scheduling lock; its session dies (a partition, a restarted
    backend); B takes the turn; A's pass, still running, is refused at its commit and places
    nothing (so it calls no agent)."""
    url = postgres.new_database()
    first, second = PostgresStore(url), PostgresStore(url)
    queue(first, n=2)
    host(first, "h1", 0)
    with first.scheduling_pass() as turn:
        assert turn is not None
        high, low = SCHEDULE_LOCK >> 32, SCHEDULE_LOCK & 0xFFFFFFFF
        with psycopg.connect(url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = %s AND objid = %s",
                (high, low),
            ).fetchall()
            assert killed == [(True,)]
            # pg_terminate_backend only signals: wait until that backend is gone with its lock
            deadline = time.monotonic() + 10
            while admin.execute(
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                "AND objid = %s",
                (high, low),
            ).fetchall():
                assert time.monotonic() < deadline, "the killed backend kept its lock"
                time.sleep(0.02)
        with second.scheduling_pass() as theirs:
            assert theirs
        with pytest.raises(StoreFenced, match="fenced: the scheduling turn passed"):
            Scheduler(first).pass_once(turn)  # the token of the turn it lost
    assert first.live_attempts() == []
    assert len(Scheduler(second).pass_once()) == 1  # the new holder schedules


def test_no_engine_inherits_from_the_other_and_open_store_is_typed_by_the_protocol(
    tmp_path: Path,
) -> None:
    assert not issubclass(PostgresStore, SqliteStore)
    assert not issubclass(SqliteStore, PostgresStore)
    assert factory.open_store.__annotations__["return"] == "Store"
    opened: Store = open_store(str(tmp_path / "c.db"))  # mypy checks both against Store
    opened.close()


def test_every_timestamp_on_postgresql_is_the_database_clock(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's own clock is far off (a skewed host): nothing the store writes, and
    nothing a scheduler wired to ``store.now`` writes, takes its time from it."""
    store = PostgresStore(postgres.new_database())
    queue(store, n=1)
    host(store, "h1", 0)
    monkeypatch.setattr(time, "time", lambda: 1000.0)
    (attempt,) = Scheduler(store, clock=store.now).pass_once()
    done, experiment = store.finish_attempt(
        attempt.id, AttemptState.FAILED_STARTUP, [AttemptState.DISPATCHING], message="x"
    )
    stamps = [done.created_at, done.finished_at, experiment.started_at, experiment.finished_at]
    stamps += [e["at"] for e in store.events_for(experiment.id)]
    assert all(s is not None and s > 1.7e9 for s in stamps), stamps


FROZEN_HOLDER = """
import sys
from tunelab.controller.scheduler import Scheduler
from tunelab.controller.store import StoreFenced
from tunelab.controller.store.postgres import PostgresStore

store = PostgresStore(sys.argv[1], lease=float(sys.argv[2]))
with store.scheduling_pass() as turn:
    print("held", turn.epoch, flush=True)
    sys.stdin.readline()  # frozen (SIGSTOP) until the parent says go on
    try:
        print("placed", len(Scheduler(store).pass_once(turn)), flush=True)
    except StoreFenced as exc:
        print(exc, flush=True)
"""


def test_a_frozen_controller_loses_the_turn_and_its_late_pass_is_fenced(
    postgres: PostgresServer,
) -> None:
    """Issue 23 item 7: a controller SIGSTOPped while it holds the scheduling turn (its TCP
    connection stays open, so the lock would be held for ever) loses the turn within about
    its lease; the other controller schedules; the frozen one, resumed, commits nothing."""
    url = postgres.new_database()
    healthy = PostgresStore(url)
    queue(healthy, n=2)
    host(healthy, "h1", 0)
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN_HOLDER, url, "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        close_fds=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().startswith("held")
        os.kill(child.pid, signal.SIGSTOP)  # our own child, not reaped: the pid is its
        frozen_at = time.monotonic()
        with healthy.scheduling_pass() as refused:
            assert refused is None  # the frozen one still holds it, for now
        taken = None
        while taken is None:
            assert time.monotonic() - frozen_at < 60, "the frozen controller kept the turn"
            with healthy.scheduling_pass() as turn:
                if turn is not None:
                    taken = time.monotonic() - frozen_at
                    assert len(Scheduler(healthy).pass_once(turn)) == 1
            time.sleep(0.1)
        print(f"turn taken over {taken:.1f} s after the freeze (lease 2 s)")
        host(healthy, "h2", 0)  # work the frozen one's pass would now place
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("go\n")
        child.stdin.flush()
        answer = child.stdout.readline()
        assert answer.startswith("fenced: the scheduling turn passed"), answer
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait(10)
    live = healthy.live_attempts()
    assert [a.host for a in live] == ["h1"]  # nothing of the late pass was committed
    assert len(healthy.attempts_for(live[0].experiment_id)) == 1


FROZEN_WRITER = """
import sys
from tunelab.controller.store.postgres import PostgresStore

store = PostgresStore(sys.argv[1], lease=float(sys.argv[2]))
with store._tx() as conn:  # the write lock, held
    conn.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
    print("in a write transaction", flush=True)
    sys.stdin.readline()
"""


def test_a_controller_frozen_inside_a_write_transaction_lets_go_of_the_write_lock(
    postgres: PostgresServer,
) -> None:
    url = postgres.new_database()
    healthy = PostgresStore(url)
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN_WRITER, url, "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        close_fds=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("in a write transaction")
        os.kill(child.pid, signal.SIGSTOP)  # our own child, not reaped: the pid is its
        frozen_at = time.monotonic()
        healthy.add_host(HostRow(name="after", address="a:1"))  # waits for the write lock
        print(f"write lock free {time.monotonic() - frozen_at:.1f} s after the freeze (lease 2 s)")
        assert healthy.get_host("after") is not None
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait(10)


def test_the_turn_lease_is_a_setting(postgres: PostgresServer) -> None:
    from tunelab.controller.config import load_config

    config = load_config(None, {}, env={"TUNELAB_CONTROLLER_DB_TURN_LEASE": "1.5s"})
    assert config.db_turn_lease == 1.5
    assert load_config(None, {}, env={}).db_turn_lease == 3.0
    store = open_store(postgres.new_database(), turn_lease=config.db_turn_lease)
    assert isinstance(store, PostgresStore) and store.lease == 1.5
    store.close()


def test_a_step_fault_counts_up_keeps_its_first_time_and_goes(store: SqlStore) -> None:
    """Issue 45.1's marks (migration 11) on both engines: the upsert counts failures in a row,
    keeps when they began, and a kind's marks are read in one query."""
    assert store.note_step_fault("watch", "w", "KeyError: 'a'", 10.0).failures == 1
    again = store.note_step_fault("watch", "w", "KeyError: 'b'", 12.0)
    assert (again.failures, again.error, again.first_at, again.last_at) == (
        2,
        "KeyError: 'b'",
        10.0,
        12.0,
    )
    store.note_step_fault("pool", "w", "other kind", 11.0)
    assert list(store.step_faults("watch")) == ["w"]
    store.clear_step_fault("watch", "w")
    assert store.step_faults("watch") == {} and list(store.step_faults("pool")) == ["w"]


def test_an_attempt_timeline_and_its_events_on_both_engines(store: SqlStore) -> None:
    timeline = {"timeline": 1, "step_seconds": 1.0, "windows": 2, "series": {"x": [1.0, None]}}
    events = [{"kind": "kv_cache_full", "at_s": 40.0, "values": {"preemptions": 140}}]
    size = store.put_timeline("a-1", timeline, events, 1.8e9)
    assert size == len(json.dumps(timeline, separators=(",", ":")).encode())
    assert store.timeline("a-1") == timeline
    assert store.timeline("a-2") is None
    assert store.timeline_events(["a-1", "a-2"]) == {"a-1": events}
    store.put_timeline("a-1", {**timeline, "windows": 3}, [], 1.8e9 + 1)  # a re-sent result
    assert store.timeline("a-1") == {**timeline, "windows": 3}
    assert store.timeline_events(["a-1"]) == {"a-1": []}
    many = [f"b-{i}" for i in range(1200)]  # past one IN (...) batch
    for attempt in many[::300]:
        store.put_timeline(attempt, timeline, events, 1.8e9)
    assert sorted(store.timeline_events(many)) == sorted(many[::300])


def test_a_noise_profile_on_both_engines(store: SqlStore) -> None:
    key = ProfileKey("1x NVIDIA H100 80GB HBM3", "vllm 0.11.0", "glm-5")
    assert store.noise_profile(key) is None
    first = NoiseProfile(key, 0.0004, 0.0025, 2.0, 20.0, 1)
    store.put_noise_profile(first, 1.8e9)
    assert store.noise_profile(key) == first
    second = NoiseProfile(key, 0.0007, 0.0019, 8.0, 60.0, 2)
    store.put_noise_profile(second, 1.8e9 + 1)  # replaced whole
    assert store.noise_profile(key) == second
    other = ProfileKey(key.host_class, "sglang 0.5.2", key.model)
    assert store.noise_profile(other) is None
