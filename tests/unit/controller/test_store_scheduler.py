"""Unit: the SQLite store's compare-and-set rules and the scheduling pass (real SQLite file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tunelab.controller.hoststate import change_host, drain
from tunelab.controller.scheduler import COMMIT_CHUNK, Placed, Scheduler
from tunelab.controller.spec import expand_text
from tunelab.controller.states import AttemptState, ExperimentState, HostState
from tunelab.controller.store import (
    AttemptChange,
    AttemptRow,
    ExperimentRow,
    HostRow,
    SqliteStore,
    StoreConflict,
    StoreNotFound,
)
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.models import selector_key

SPEC = """
name: s
host: {labels: {pool: a}, gpus: GPUS}
server: {command: [sim], flags: {--port: "{port}"}, ready: {model: m}}
benchmark: {concurrency: [1], requests: 5}
repeat: N
"""


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "controller.db")


def queue(
    store: SqlStore, gpus: int = 0, n: int = 1, priority: int = 0, prefix: str = "e"
) -> list[str]:
    text = SPEC.replace("GPUS", str(gpus)).replace("N", str(n)) + f"priority: {priority}\n"
    rows = []
    for i, e in enumerate(expand_text(text)):
        key = selector_key(e.host)
        row = ExperimentRow(f"{prefix}{i}", "g", e.name, ExperimentState.QUEUED, e.spec, e.priority)
        row.selector_key, row.gpus_needed, row.submitted_at = key, gpus, 1.0
        rows.append(row)
    store.insert_experiments(rows)
    return [r.id for r in rows]


def host(store: SqlStore, name: str, gpus: int, labels: dict[str, str] | None = None) -> None:
    store.add_host(HostRow(name=name, address=f"{name}:1", labels=labels or {"pool": "a"}))
    store.transition_host(name, store.get_host(name), HostState.READY, gpu_count=gpus)  # type: ignore[arg-type]


def test_priority_then_submission_order_one_run_per_host(store: SqliteStore) -> None:
    low = queue(store, n=2, prefix="low")
    high = queue(store, n=1, priority=5, prefix="high")
    host(store, "h1", 0)
    created = Scheduler(store).pass_once()
    assert [a.experiment_id for a in created] == high  # higher priority first, host now busy
    assert Scheduler(store).pass_once() == []  # one run at a time on h1
    host(store, "h2", 0)
    assert [a.experiment_id for a in Scheduler(store).pass_once()] == low[:1]


def test_disjoint_gpu_sets_share_a_host(store: SqliteStore) -> None:
    queue(store, gpus=4, n=3)
    host(store, "big", 8)
    created = Scheduler(store).pass_once()
    assert sorted(tuple(a.gpus) for a in created) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert all(a.state is AttemptState.DISPATCHING and a.host == "big" for a in created)


def test_labels_and_gpu_count_must_match_and_drained_hosts_get_nothing(store: SqliteStore) -> None:
    queue(store, gpus=4)
    host(store, "other-pool", 8, {"pool": "b"})
    host(store, "too-small", 2)
    host(store, "drained", 8)
    change_host(store, "drained", drain(True, clear_quarantine=False))
    assert Scheduler(store).pass_once() == []


def test_lost_attempt_requeues_avoiding_the_host_then_fails_after_max_attempts(
    store: SqliteStore,
) -> None:
    [experiment_id] = queue(store)
    host(store, "h1", 0)
    host(store, "h2", 0)
    first = Scheduler(store).pass_once()[0]
    _, experiment = store.finish_attempt(
        first.id, AttemptState.LOST, [AttemptState.DISPATCHING], message="gone"
    )
    assert experiment.state is ExperimentState.QUEUED and experiment.avoid_hosts == [first.host]
    second = Scheduler(store).pass_once()[0]
    assert second.host != first.host and second.number == 2
    store.finish_attempt(second.id, AttemptState.LOST, [AttemptState.DISPATCHING])
    third = Scheduler(store).pass_once()[0]
    _, experiment = store.finish_attempt(third.id, AttemptState.LOST, [AttemptState.DISPATCHING])
    assert experiment.state is ExperimentState.FAILED and "lost 3 times" in experiment.message
    assert experiment_id == experiment.id


def test_failed_benchmark_is_not_retried(store: SqliteStore) -> None:
    queue(store)
    host(store, "h1", 0)
    attempt = Scheduler(store).pass_once()[0]
    store.transition_attempt(attempt.id, AttemptState.BENCHMARKING, [AttemptState.DISPATCHING])
    _, experiment = store.finish_attempt(
        attempt.id, AttemptState.FAILED_BENCHMARK, [AttemptState.BENCHMARKING]
    )
    assert experiment.state is ExperimentState.FAILED
    assert Scheduler(store).pass_once() == []


def test_compare_and_set_refuses_a_stale_write_and_terminal_rows_are_final(
    store: SqliteStore,
) -> None:
    queue(store)
    host(store, "h1", 0)
    attempt = Scheduler(store).pass_once()[0]
    with pytest.raises(StoreConflict):
        store.transition_attempt(attempt.id, AttemptState.READY, [AttemptState.STARTING])
    store.finish_attempt(attempt.id, AttemptState.SUCCEEDED, [AttemptState.DISPATCHING])
    with pytest.raises(StoreConflict):
        store.finish_attempt(
            attempt.id, AttemptState.LOST, [s for s in AttemptState if s.is_active()]
        )
    events = store.events_for(attempt.experiment_id)
    assert [e["to_state"] for e in events if e["kind"] == "attempt"] == ["DISPATCHING", "SUCCEEDED"]


def test_a_batch_of_attempt_changes_sets_every_column_and_moves_only_the_expected(
    store: SqliteStore,
) -> None:
    queue(store, n=3)
    for name in ("h1", "h2", "h3"):
        host(store, name, 0)
    a, b, c = Scheduler(store).pass_once()
    store.finish_attempt(c.id, AttemptState.CANCELLED, [AttemptState.DISPATCHING])  # meanwhile
    D = AttemptState.DISPATCHING
    moved = store.change_attempts(
        [
            AttemptChange(a.id, {"acked_at": 5.0}, AttemptState.STARTING, (D,), "accepted"),
            AttemptChange(b.id, {"acked_at": 6.0}),  # columns only
            AttemptChange(c.id, {"acked_at": 7.0}, AttemptState.STARTING, (D,), "late"),
        ]
    )
    assert moved == {a.id}
    rows = {r.id: r for r in (store.get_attempt(i) for i in (a.id, b.id, c.id)) if r}
    assert [rows[i].state for i in (a.id, b.id, c.id)] == [
        AttemptState.STARTING,
        AttemptState.DISPATCHING,
        AttemptState.CANCELLED,
    ]
    assert [rows[i].acked_at for i in (a.id, b.id, c.id)] == [5.0, 6.0, 7.0]
    events = store.events_for(a.experiment_id)
    assert [e["message"] for e in events if e["to_state"] == "STARTING"] == ["accepted"]
    assert store.change_attempts([]) == set()


def test_a_wait_is_kept_once_per_selector_and_shown_on_each_queued_experiment(
    store: SqliteStore,
) -> None:
    """The reason a queue waits is one row per selector: a host changing state used to rewrite
    every queued experiment (10,000 rows, 230 ms under the write lock)."""
    ids = queue(store, gpus=4, n=3)
    Scheduler(store).pass_once()
    nobody = "waiting: no registered host matches {'pool': 'a'} with 4 GPUs (tunelab hosts add)"
    assert {store.get_experiment(i).message for i in ids} == {nobody}  # type: ignore[union-attr]
    assert store._query("SELECT COUNT(*) AS n FROM experiments WHERE message != ''")[0]["n"] == 0
    assert [dict(r) for r in store._query("SELECT * FROM queue_waits")] == [
        {"selector_key": store.get_experiment(ids[0]).selector_key, "message": nobody}  # type: ignore[union-attr]
    ]

    host(store, "big", 8)
    first, second = Scheduler(store).pass_once()
    shown = {e.id: e.message for e in store.list_experiments()}
    assert shown[first.experiment_id] == shown[second.experiment_id] == "dispatching"
    assert shown[ids[2]] == "waiting for a free host"  # the wait follows the hosts' state

    store.finish_attempt(first.id, AttemptState.LOST, [AttemptState.DISPATCHING])
    change_host(store, "big", drain(True, clear_quarantine=False))
    Scheduler(store).pass_once()
    retried = store.get_experiment(first.experiment_id)
    assert retried is not None and retried.state is ExperimentState.QUEUED
    assert retried.message == (  # its own message first, then why its queue waits
        "attempt 1 lost on big; queued again; waiting: no matching host can take runs now: "
        "big DRAINING (tunelab hosts ls)"
    )

    for experiment_id in (first.experiment_id, ids[2]):
        store.request_cancel(experiment_id)
    Scheduler(store).pass_once()
    assert store._query("SELECT * FROM queue_waits") == []  # nothing waits any more


def test_the_database_survives_a_reopen(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "c.db")
    ids = queue(first, n=3)
    first.close()
    again = SqliteStore(tmp_path / "c.db")
    assert [e.id for e in again.list_experiments()] == ids
    assert (tmp_path / "c.db").stat().st_mode & 0o777 == 0o600


def test_a_waiting_queue_says_why(store: SqliteStore) -> None:
    ids = queue(store, gpus=4, n=2)
    assert Scheduler(store).pass_once() == []
    messages = {store.get_experiment(i).message for i in ids}  # type: ignore[union-attr]
    assert messages == {
        "waiting: no registered host matches {'pool': 'a'} with 4 GPUs (tunelab hosts add)"
    }
    host(store, "big", 8)
    change_host(store, "big", drain(True, clear_quarantine=False))
    Scheduler(store).pass_once()
    assert store.get_experiment(ids[0]).message == (  # type: ignore[union-attr]
        "waiting: no matching host can take runs now: big DRAINING (tunelab hosts ls)"
    )
    seen = store.get_host("big")
    assert seen is not None
    store.transition_host(
        "big", seen, HostState.UNREACHABLE, drain=False, state_reason="connection refused"
    )
    Scheduler(store).pass_once()
    assert store.get_experiment(ids[0]).message == (  # type: ignore[union-attr]
        "waiting: no matching host can take runs now: big UNREACHABLE (connection refused) "
        "(tunelab hosts ls)"
    )


def test_a_submission_retried_with_its_request_id_queues_once(store: SqliteStore) -> None:
    first = [ExperimentRow("r1", "g-first", "r", ExperimentState.QUEUED, {"host": {}})]
    again = [ExperimentRow("r2", "g-again", "r", ExperimentState.QUEUED, {"host": {}})]
    assert store.insert_experiments(first, request_id="cli-123") == "g-first"
    assert store.insert_experiments(again, request_id="cli-123") == "g-first"  # the first group
    assert [e.id for e in store.list_experiments()] == ["r1"]
    assert [e.id for e in store.group_experiments("g-first")] == ["r1"]
    assert store.insert_experiments(again, request_id="cli-456") == "g-again"
    assert store.insert_experiments(again[:0]) == ""  # no request id: nothing remembered


def test_a_missing_row_is_store_not_found(store: SqliteStore) -> None:
    with pytest.raises(StoreNotFound, match="no host 'nope'"):
        store.remove_host("nope")
    with pytest.raises(StoreNotFound, match="no host 'nope'"):
        store.update_host("nope", failures=1)
    with pytest.raises(StoreNotFound, match="no host 'nope'"):
        store.update_host("nope", token="s3cret")  # and the token is not kept
    assert store.secrets.get("nope") is None
    with pytest.raises(StoreNotFound, match="no experiment 'nope'"):
        store.set_experiment_state("nope", ExperimentState.CANCELLED, [ExperimentState.QUEUED])
    with pytest.raises(StoreNotFound, match="no attempt 'nope'"):
        store.transition_attempt("nope", AttemptState.STARTING, [AttemptState.DISPATCHING])
    assert not issubclass(StoreNotFound, KeyError)


def test_a_failed_attempt_keeps_its_failure_reason_in_columns(store: SqliteStore) -> None:
    queue(store)
    host(store, "h1", 0)
    (attempt,) = Scheduler(store).pass_once()
    done, _ = store.finish_attempt(
        attempt.id,
        AttemptState.FAILED_STARTUP,
        [AttemptState.DISPATCHING],
        message="exited",
        failure_reason="CUDA_OOM",
        failure_line="torch.OutOfMemoryError: CUDA out of memory",
    )
    assert (done.failure_reason, done.failure_line) == (
        "CUDA_OOM",
        "torch.OutOfMemoryError: CUDA out of memory",
    )
    assert store.get_attempt(attempt.id).failure_reason == "CUDA_OOM"  # type: ignore[union-attr]


def test_a_wide_pass_hands_on_each_chunk_once_it_is_committed(store: SqliteStore) -> None:
    """Issue 22: a 200-wide pass committed everything before its first StartRun; now each
    chunk of COMMIT_CHUNK placements is committed, then sent, before the next commits."""
    for i in range(60):
        host(store, f"h{i:02d}", 0)
    queued = queue(store, n=60)
    ticks = iter(float(t) for t in range(100, 200))
    scheduler = Scheduler(store, clock=lambda: next(ticks))
    seen: list[list[AttemptRow]] = []

    def created(decision: Placed) -> None:
        chunk = decision.attempts
        for a in chunk:  # the decision carries the spec each runs and the host it runs on
            experiment = store.get_experiment(a.experiment_id)
            assert experiment is not None and decision.specs[a.experiment_id] == experiment.spec
            assert decision.hosts[a.host].name == a.host
        # committed already: another reader sees the chunk DISPATCHING, the rest still queued
        assert all(store.get_attempt(a.id).state is AttemptState.DISPATCHING for a in chunk)  # type: ignore[union-attr]
        placed = {a.experiment_id for c in seen for a in c} | {a.experiment_id for a in chunk}
        waiting = store.list_experiments([ExperimentState.QUEUED], limit=100)
        assert {e.id for e in waiting} == set(queued) - placed
        seen.append(chunk)

    made = scheduler.pass_once(created=created)
    assert [len(c) for c in seen] == [COMMIT_CHUNK, COMMIT_CHUNK, 60 - 2 * COMMIT_CHUNK]
    assert [a.id for a in made] == [a.id for c in seen for a in c]
    stamps = sorted({a.created_at for a in made})
    assert len(stamps) == 3  # each chunk stamped with its own commit time


def test_a_placement_on_a_host_removed_since_the_pass_read_it_stays_queued(
    store: SqliteStore,
) -> None:
    host(store, "h1", 0)
    host(store, "h2", 0)
    first, second = queue(store, n=2)
    placements: list[tuple[str, str, list[int]]] = [(first, "h1", []), (second, "h2", [])]
    store.remove_host("h2")
    with store.scheduling_pass() as turn:
        assert turn is not None
        made = store.create_attempts(placements, 5.0, turn)
    assert [(a.experiment_id, a.host) for a in made] == [(first, "h1")]
    assert store.get_experiment(second).state is ExperimentState.QUEUED  # type: ignore[union-attr]
    assert store.attempts_for(second) == []
    with pytest.raises(StoreNotFound, match="no host 'h2'"):  # not "is not queued"
        store.create_attempt(second, "h2", [], 6.0)
    with pytest.raises(StoreConflict, match="has live attempts"):
        store.remove_host("h1")  # once committed, an attempt keeps its host


def test_a_pass_claims_its_experiments_by_id_not_by_scanning_the_queue(tmp_path: Path) -> None:
    """SQLite planned a chunk's claim on the queue index and read every queued row: 5 ms per
    commit with 10,000 queued, which made chunked commits cost more than they saved."""
    path = tmp_path / "controller.db"
    store = SqliteStore(path)
    sql = store.sql.claim_queued(COMMIT_CHUNK)
    store.close()
    ids = [f"x-{i}" for i in range(COMMIT_CHUNK)]
    with sqlite3.connect(path) as conn:
        plan = " ".join(
            str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", (1.0, *ids))
        )
    assert "(id=?)" in plan and "experiments_queue" not in plan
